/* tests/example_engine_loop.c: an inference engine's decode loop played
 * against the online scaling API (include/kvcal_quant.h).
 *
 * Four sequences of different prompt lengths are prefilled, then decoded
 * token by token for 48 steps; every step each layer's new K/V go through a
 * running-max scaler into a paged FP8 cache (NHD, 16-token blocks handed out
 * from a free list, a per (token, head) scale array beside it). The K of
 * layer 1 grows during decode and has one outlier step, so its scales grow
 * while older tokens sit in the cache. At the end every token of every
 * sequence is read back through its block table and dequantized: each value
 * must be within e4m3's rounding of what was written, old tokens included.
 * With a CUDA device the same loop runs on the GPU too (the _launch
 * functions on a stream) and must produce the same bytes.
 *
 * Exit 0 when every check holds, 1 otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcal.h"

#ifdef KVCAL_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

enum {
    LAYERS = 2,
    H = 4,
    D = 64,
    BLOCK = 16,
    SEQS = 4,
    DECODE_STEPS = 48,
    MAX_LEN = 128
};
enum { NUM_BLOCKS = SEQS * MAX_LEN / BLOCK + 8 };

static const int prompt_len[SEQS] = {37, 5, 64, 19};

/* What the engine keeps per sequence: its block table. */
typedef struct sequence {
    int len;
    int blocks[MAX_LEN / BLOCK];
} sequence;

/* Deterministic K/V of (layer, sequence, position, kv, head, dim). */
static float activation(int l, int s, int pos, int kv, int h, int d)
{
    uint32_t x = (uint32_t)(((((l * 7 + s) * 131 + pos) * 2 + kv) * H + h) * D + d);
    x = x * 2654435761u ^ 0x9e3779b9u;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    float u = (float)(x >> 8) / 8388608.0f - 1.0f;
    float amp = 1.0f + 0.5f * h;
    if (l == 1 && kv == 0 && pos >= 64) /* layer 1's K grows in decode ... */
        amp *= 1.0f + (pos - 64) / 16.0f;
    if (l == 1 && kv == 0 && pos == 90) /* ... with one outlier step */
        amp *= 20.0f;
    return u * amp;
}

/* One layer's cache and scaler on one side (host or device). */
typedef struct layer_state {
    kvcal_kv_cache cache;
    kvcal_kv_scaler_t *scaler;
} layer_state;

typedef struct engine {
    int on_device;
    layer_state layer[LAYERS];
} engine;

static void *side_alloc(int on_device, size_t bytes)
{
#ifdef KVCAL_WITH_CUDA
    if (on_device) {
        void *p = NULL;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
    }
#endif
    (void)on_device;
    return calloc(1, bytes);
}

static void side_free(int on_device, void *p)
{
#ifdef KVCAL_WITH_CUDA
    if (on_device) {
        cudaFree(p);
        return;
    }
#endif
    (void)on_device;
    free(p);
}

static void side_put(int on_device, void *dst, const void *src, size_t bytes)
{
#ifdef KVCAL_WITH_CUDA
    if (on_device) {
        cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
        return;
    }
#endif
    (void)on_device;
    memcpy(dst, src, bytes);
}

static void side_get(int on_device, void *dst, const void *src, size_t bytes)
{
#ifdef KVCAL_WITH_CUDA
    if (on_device) {
        cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
        return;
    }
#endif
    (void)on_device;
    memcpy(dst, src, bytes);
}

static int engine_create(engine *e, int on_device)
{
    memset(e, 0, sizeof *e);
    e->on_device = on_device;
    size_t bytes = (size_t)NUM_BLOCKS * BLOCK * H * D,
           scales = (size_t)NUM_BLOCKS * BLOCK * H * 4;
    for (int l = 0; l < LAYERS; l++) {
        kvcal_kv_cache *c = &e->layer[l].cache;
        c->k = side_alloc(on_device, bytes);
        c->v = side_alloc(on_device, bytes);
        c->k_scale = side_alloc(on_device, scales);
        c->v_scale = side_alloc(on_device, scales);
        c->num_blocks = NUM_BLOCKS, c->block_size = BLOCK, c->num_kv_heads = H,
        c->head_dim = D;
        c->layout = KVCAL_CACHE_NHD;
        if (!c->k || !c->v || !c->k_scale || !c->v_scale) {
            fprintf(stderr, "example: cannot allocate the cache\n");
            return -1;
        }
        kvcal_status st = kvcal_kv_scaler_create(H, KVCAL_SCALER_RUNNING_MAX, 0.0f,
                                                 on_device, &e->layer[l].scaler);
        if (st != KVCAL_OK) {
            fprintf(stderr, "example: %s\n", kvcal_last_error());
            return -1;
        }
    }
    return 0;
}

static void engine_destroy(engine *e)
{
    for (int l = 0; l < LAYERS; l++) {
        kvcal_kv_cache *c = &e->layer[l].cache;
        side_free(e->on_device, c->k);
        side_free(e->on_device, c->v);
        side_free(e->on_device, c->k_scale);
        side_free(e->on_device, c->v_scale);
        kvcal_kv_scaler_destroy(e->layer[l].scaler);
    }
}

/* One engine step on the given tokens: K/V (n, H, D) f32 and their slots. */
static int engine_step(engine *e, int l, const float *k, const float *v,
                       const int64_t *slots, int n)
{
    size_t bytes = (size_t)n * H * D * sizeof(float);
    float *dk = side_alloc(e->on_device, bytes), *dv = side_alloc(e->on_device, bytes);
    int64_t *ds = side_alloc(e->on_device, (size_t)n * sizeof(int64_t));
    int rc = -1;
    if (!dk || !dv || !ds)
        goto fail;
    side_put(e->on_device, dk, k, bytes);
    side_put(e->on_device, dv, v, bytes);
    side_put(e->on_device, ds, slots, (size_t)n * sizeof(int64_t));
    kvcal_kv_batch b = {dk, dv, KVCAL_DTYPE_F32, n, H * D, D, H * D, D, ds};
    kvcal_status st =
        e->on_device
            ? kvcal_kv_scaler_quantize_launch(e->layer[l].scaler, &b, &e->layer[l].cache,
                                              NULL)
            : kvcal_kv_scaler_quantize_ref(e->layer[l].scaler, &b, &e->layer[l].cache);
    if (st != KVCAL_OK) {
        fprintf(stderr, "example: step: %s\n", kvcal_last_error());
        goto fail;
    }
    rc = 0;
fail:
    side_free(e->on_device, dk);
    side_free(e->on_device, dv);
    side_free(e->on_device, ds);
    return rc;
}

static int64_t slot_of(const sequence *s, int pos)
{
    return (int64_t)s->blocks[pos / BLOCK] * BLOCK + pos % BLOCK;
}

/* Prefill then decode; block tables come from one free list. */
static int engine_run(engine *e, sequence *seq, float first_scale[LAYERS],
                      float final_scale[LAYERS])
{
    int next_free = 0;
    memset(seq, 0, sizeof(sequence) * SEQS);
    static float k[SEQS * MAX_LEN * H * D], v[SEQS * MAX_LEN * H * D];
    int64_t slots[SEQS * MAX_LEN];
    for (int step = 0; step <= DECODE_STEPS; step++) {
        int n = 0;
        for (int s = 0; s < SEQS; s++) {
            int add = step == 0 ? prompt_len[s] : 1;
            for (int i = 0; i < add; i++, n++) {
                int pos = seq[s].len++;
                if (pos % BLOCK == 0)
                    seq[s].blocks[pos / BLOCK] = next_free++;
                slots[n] = slot_of(&seq[s], pos);
            }
        }
        for (int l = 0; l < LAYERS; l++) {
            int t = 0;
            for (int s = 0; s < SEQS; s++)
                for (int pos = seq[s].len - (step == 0 ? prompt_len[s] : 1);
                     pos < seq[s].len; pos++, t++)
                    for (int h = 0; h < H; h++)
                        for (int d = 0; d < D; d++) {
                            k[(t * H + h) * D + d] = activation(l, s, pos, 0, h, d);
                            v[(t * H + h) * D + d] = activation(l, s, pos, 1, h, d);
                        }
            if (engine_step(e, l, k, v, slots, n) != 0)
                return -1;
            float ks[H];
            if (kvcal_kv_scaler_read(e->layer[l].scaler, NULL, ks, NULL, NULL) !=
                KVCAL_OK)
                return -1;
            if (step == 0)
                first_scale[l] = ks[H - 1];
            final_scale[l] = ks[H - 1];
        }
    }
    return 0;
}

/* Reads every token back and checks it against what was written. */
static int engine_check(engine *e, const sequence *seq, double *worst)
{
    int bad = 0;
    *worst = 0.0;
    for (int l = 0; l < LAYERS; l++) {
        for (int s = 0; s < SEQS; s++) {
            int n = seq[s].len;
            int64_t slots[MAX_LEN];
            for (int pos = 0; pos < n; pos++)
                slots[pos] = slot_of(&seq[s], pos);
            size_t bytes = (size_t)n * H * D * sizeof(float);
            size_t sbytes = (size_t)NUM_BLOCKS * BLOCK * H * 4;
            float *ko = malloc(bytes), *vo = malloc(bytes), *ksc = malloc(sbytes),
                  *vsc = malloc(sbytes);
            float *dko = side_alloc(e->on_device, bytes),
                  *dvo = side_alloc(e->on_device, bytes);
            int64_t *ds = side_alloc(e->on_device, sizeof slots);
            side_put(e->on_device, ds, slots, sizeof slots);
            kvcal_kv_batch b = {NULL, NULL, KVCAL_DTYPE_F32, n, H * D, D, H * D, D, ds};
            const kvcal_kv_cache *c = &e->layer[l].cache;
            kvcal_status st =
                e->on_device
                    ? kvcal_kv_dequantize_launch(&b, c, KVCAL_GRANULARITY_TENSOR, NULL,
                                                 NULL, dko, dvo, KVCAL_DTYPE_F32, NULL)
                    : kvcal_kv_dequantize_ref(&b, c, KVCAL_GRANULARITY_TENSOR, NULL, NULL,
                                              dko, dvo, KVCAL_DTYPE_F32);
            side_get(e->on_device, ko, dko, bytes);
            side_get(e->on_device, vo, dvo, bytes);
            side_get(e->on_device, ksc, c->k_scale, sbytes);
            side_get(e->on_device, vsc, c->v_scale, sbytes);
            bad += st != KVCAL_OK;
            for (int kv = 0; kv < 2; kv++)
                for (int pos = 0; pos < n; pos++)
                    for (int h = 0; h < H; h++) {
                        /* NHD scales: (block, offset, head) = slot * H + head */
                        float sc = (kv ? vsc : ksc)[slots[pos] * H + h];
                        for (int d = 0; d < D; d++) {
                            double x = activation(l, s, pos, kv, h, d);
                            double y = (kv ? vo : ko)[(pos * H + h) * D + d];
                            /* e4m3 rounding: 2^-4 relative, 2^-10 scale absolute */
                            double lim =
                                ldexp(fabs(x), -4) + ldexp(sc, -10) + 1e-6 * fabs(x);
                            double err = fabs(x - y) / (fabs(x) + sc);
                            *worst = err > *worst ? err : *worst;
                            bad += fabs(x - y) > lim || fabs(x) > 448.0 * sc * (1 + 1e-6);
                        }
                    }
            free(ko), free(vo), free(ksc), free(vsc);
            side_free(e->on_device, dko);
            side_free(e->on_device, dvo);
            side_free(e->on_device, ds);
        }
    }
    return bad;
}

/* Compares the K and V cache bytes and scales of two engines. */
static int engine_same(const engine *a, const engine *b)
{
    size_t bytes = (size_t)NUM_BLOCKS * BLOCK * H * D,
           sb = (size_t)NUM_BLOCKS * BLOCK * H * 4;
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    int diff = 0;
    for (int l = 0; l < LAYERS; l++) {
        const kvcal_kv_cache *ca = &a->layer[l].cache, *cb = &b->layer[l].cache;
        void *pa[4] = {ca->k, ca->v, ca->k_scale, ca->v_scale},
             *pb[4] = {cb->k, cb->v, cb->k_scale, cb->v_scale};
        for (int i = 0; i < 4; i++) {
            size_t n = i < 2 ? bytes : sb;
            side_get(a->on_device, x, pa[i], n);
            side_get(b->on_device, y, pb[i], n);
            diff += memcmp(x, y, n) != 0;
        }
    }
    free(x);
    free(y);
    return diff;
}

int main(void)
{
    int sides = kvcal_cuda_device_count() > 0 ? 2 : 1, failures = 0;
    engine e[2];
    sequence seq[SEQS];
    for (int side = 0; side < sides; side++) {
        float first[LAYERS], final[LAYERS];
        double worst = 0.0;
        if (engine_create(&e[side], side) != 0 ||
            engine_run(&e[side], seq, first, final) != 0)
            return 1;
        int bad = engine_check(&e[side], seq, &worst);
        printf("example_engine_loop (%s): %d sequences, prefill + %d decode steps, %d "
               "layers;\n"
               "  layer 1 head %d K scale grew %.3g -> %.3g while its old tokens stayed "
               "in the cache;\n"
               "  every token read back: worst |error| / (|x| + scale) = %.3g, %d values "
               "out of bounds\n",
               side ? "CUDA" : "CPU reference", SEQS, DECODE_STEPS, LAYERS, H - 1,
               first[1], final[1], worst, bad);
        failures += bad != 0;
    }
    if (sides == 2) {
        int diff = engine_same(&e[0], &e[1]);
        printf("  CUDA and CPU caches: %s\n",
               diff ? "DIFFER" : "identical bytes and scales");
        failures += diff != 0;
    }
    for (int side = 0; side < sides; side++)
        engine_destroy(&e[side]);
    return failures ? 1 : 0;
}
