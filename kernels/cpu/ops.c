/* kernels/cpu/ops.c: fp32 CPU reference ops of the model runner.
 *
 * Each output element is computed by the same sequence of float operations
 * whatever the thread count, tile position or batch composition, so a run is
 * bit-reproducible and a token's activations do not depend on its neighbours
 * in the batch. */
#include "kernels/cpu/ops.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "core/fp8.h"
#include "core/hist_rule.h"
#include "kernels/cuda/bf16.h"
#include "kernels/moe_limits.h"

/* --- threading ----------------------------------------------------------- */

#define MAX_THREADS 256

static int thread_override;

void kvcal_cpu_set_threads(int n)
{
    thread_override = n > 0 ? (n > MAX_THREADS ? MAX_THREADS : n) : 0;
}

int kvcal_cpu_threads(void)
{
    if (thread_override > 0)
        return thread_override;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
}

typedef void (*work_fn)(void *ctx, int64_t item);

typedef struct {
    work_fn fn;
    void *ctx;
    int64_t items;
    int stride;
    int first;
} worker_arg;

static void *worker_main(void *p)
{
    const worker_arg *a = p;
    for (int64_t i = a->first; i < a->items; i += a->stride)
        a->fn(a->ctx, i);
    return NULL;
}

/* Runs fn(ctx, i) for i in [0, items) on up to kvcal_cpu_threads() threads
 * (item i goes to thread i % threads). `flops` below the threshold, or a
 * failed pthread_create, runs the remaining share on the calling thread:
 * results never depend on how the items were spread. */
static void parallel_for(work_fn fn, void *ctx, int64_t items, double flops)
{
    int nt = kvcal_cpu_threads();
    if (flops < 2e6 || items < 2)
        nt = 1;
    if (nt > items)
        nt = (int)items;
    pthread_t tid[MAX_THREADS];
    worker_arg args[MAX_THREADS];
    int started = 0;
    for (int t = 0; t < nt; t++)
        args[t] = (worker_arg){fn, ctx, items, nt, t};
    for (int t = 1; t < nt; t++) {
        if (pthread_create(&tid[t], NULL, worker_main, &args[t]) != 0)
            break;
        started = t;
    }
    worker_main(&args[0]);
    for (int t = started + 1; t < nt; t++)
        worker_main(&args[t]);
    for (int t = 1; t <= started; t++)
        pthread_join(tid[t], NULL);
}

/* --- rmsnorm ------------------------------------------------------------- */

void kvcal_rmsnorm_ref(float *out, const float *x, const float *w, int rows, int dim,
                       float eps)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * dim; // (dim)
        float *o = out + (int64_t)r * dim;      // (dim)
        double ss = 0.0;
        for (int i = 0; i < dim; i++)
            ss += (double)xr[i] * xr[i];
        float inv = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int i = 0; i < dim; i++)
            o[i] = w ? w[i] * (xr[i] * inv) : xr[i] * inv;
    }
}

/* --- matmul -------------------------------------------------------------- */

/* Dot products run on 8 independent lanes (lane j sums elements j mod 8),
 * then the lanes are summed in a fixed tree: every path below uses exactly
 * this order, so a value does not depend on the tile it fell into. */
#define LANES 8
#define TILE_R 64
/* On x86-64 the dot-product loops also get an AVX2 build picked at load
 * time; both do the same float operations in the same order (no FMA
 * contraction in ISO C mode), so results are bit-identical. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif
#define TILE_N 64

typedef struct {
    float *out;
    const float *x, *w, *bias;
    int rows, k, n;
    int64_t tiles_n;
} matmul_ctx;

static inline float lanes_sum(const float *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static inline float dot_tail(const float *x, const float *w, int k0, int k)
{
    float t = 0.0f;
    for (int i = k0; i < k; i++)
        t += x[i] * w[i];
    return t;
}

/* out[r][c] for 4 x rows and 4 w rows. */
VECTOR_CLONES
static void micro_4x4(float *out, int64_t ldo, const float *x, const float *w, int k,
                      const float *bias)
{
    float acc[4][4][LANES];
    memset(acc, 0, sizeof acc);
    int k8 = k - k % LANES;
    const float *x0 = x, *x1 = x + k, *x2 = x + 2 * (int64_t)k, *x3 = x + 3 * (int64_t)k;
    const float *w0 = w, *w1 = w + k, *w2 = w + 2 * (int64_t)k, *w3 = w + 3 * (int64_t)k;
    for (int i = 0; i < k8; i += LANES) {
        for (int l = 0; l < LANES; l++) {
            float a0 = x0[i + l], a1 = x1[i + l], a2 = x2[i + l], a3 = x3[i + l];
            float b0 = w0[i + l], b1 = w1[i + l], b2 = w2[i + l], b3 = w3[i + l];
            acc[0][0][l] += a0 * b0;
            acc[0][1][l] += a0 * b1;
            acc[0][2][l] += a0 * b2;
            acc[0][3][l] += a0 * b3;
            acc[1][0][l] += a1 * b0;
            acc[1][1][l] += a1 * b1;
            acc[1][2][l] += a1 * b2;
            acc[1][3][l] += a1 * b3;
            acc[2][0][l] += a2 * b0;
            acc[2][1][l] += a2 * b1;
            acc[2][2][l] += a2 * b2;
            acc[2][3][l] += a2 * b3;
            acc[3][0][l] += a3 * b0;
            acc[3][1][l] += a3 * b1;
            acc[3][2][l] += a3 * b2;
            acc[3][3][l] += a3 * b3;
        }
    }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            float s = lanes_sum(acc[r][c]) +
                      dot_tail(x + r * (int64_t)k, w + c * (int64_t)k, k8, k);
            out[r * ldo + c] = bias ? s + bias[c] : s;
        }
}

/* out[0][0] for one x row and one w row, in the order of micro_4x4. */
VECTOR_CLONES
static float dot_1x1(const float *x, const float *w, int k)
{
    float acc[LANES] = {0};
    int k8 = k - k % LANES;
    for (int i = 0; i < k8; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += x[i + l] * w[i + l];
    return lanes_sum(acc) + dot_tail(x, w, k8, k);
}

static void matmul_tile(void *p, int64_t item)
{
    const matmul_ctx *c = p;
    int r0 = (int)(item / c->tiles_n) * TILE_R;
    int n0 = (int)(item % c->tiles_n) * TILE_N;
    int r1 = r0 + TILE_R < c->rows ? r0 + TILE_R : c->rows;
    int n1 = n0 + TILE_N < c->n ? n0 + TILE_N : c->n;
    int64_t k = c->k;
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
        int j = n0;
        for (; j + 4 <= n1; j += 4)
            micro_4x4(c->out + r * (int64_t)c->n + j, c->n, c->x + r * k, c->w + j * k,
                      c->k, c->bias ? c->bias + j : NULL);
        for (; j < n1; j++)
            for (int rr = r; rr < r + 4; rr++) {
                float s = dot_1x1(c->x + rr * k, c->w + j * k, c->k);
                c->out[rr * (int64_t)c->n + j] = c->bias ? s + c->bias[j] : s;
            }
    }
    for (; r < r1; r++)
        for (int j = n0; j < n1; j++) {
            float s = dot_1x1(c->x + r * k, c->w + j * k, c->k);
            c->out[r * (int64_t)c->n + j] = c->bias ? s + c->bias[j] : s;
        }
}

void kvcal_matmul_ref(float *out, const float *x, const float *w, const float *bias,
                      int rows, int k, int n)
{
    if (rows <= 0 || n <= 0)
        return;
    matmul_ctx c = {out, x, w, bias, rows, k, n, (n + TILE_N - 1) / TILE_N};
    int64_t tiles = (int64_t)((rows + TILE_R - 1) / TILE_R) * c.tiles_n;
    parallel_for(matmul_tile, &c, tiles, 2.0 * rows * (double)k * n);
}

/* --- rope ---------------------------------------------------------------- */

void kvcal_rope_scaled_ref(float *x, const int32_t *pos, const float *inv_freq,
                           int tokens, int heads, int head_dim, int rot_dim,
                           int interleaved, float attention_factor)
{
    int half = rot_dim / 2;
    for (int t = 0; t < tokens; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            float c = (float)cos((double)angle) * attention_factor;
            float s = (float)sin((double)angle) * attention_factor;
            for (int h = 0; h < heads; h++) {
                float *v = x + ((int64_t)t * heads + h) * head_dim; // (head_dim)
                int a = interleaved ? 2 * i : i;
                int b = interleaved ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x1 * c + x0 * s;
            }
        }
    }
}

void kvcal_query_temperature_ref(float *x, const int32_t *pos, int64_t rows, int cols,
                                 float scale, float floor_scale)
{
    for (int64_t t = 0; t < rows; t++) {
        const float f =
            log1pf(floorf(((float)pos[t] + 1.0f) / floor_scale)) * scale + 1.0f;
        for (int i = 0; i < cols; i++)
            x[t * cols + i] *= f;
    }
}

void kvcal_rope_ref(float *x, const int32_t *pos, const float *inv_freq, int tokens,
                    int heads, int head_dim, int rot_dim, int interleaved)
{
    /* x * 1.0f is x exactly: the unscaled rotation is unchanged */
    kvcal_rope_scaled_ref(x, pos, inv_freq, tokens, heads, head_dim, rot_dim, interleaved,
                          1.0f);
}

/* --- rope + observer ----------------------------------------------------- */

/* max(m, a) where a NaN wins, as the kernels' max on the float bits of |x| */
static inline float max_nan_wins(float m, float a)
{
    return isnan(m) || a <= m ? m : a;
}

/* Folds n_kv_heads rows of head_dim values into one K or V slice of obs. */
static void observe_heads(const float *x, int n_kv_heads, int head_dim,
                          const kvcal_kv_observer *obs, int kv)
{
    for (int h = 0; h < n_kv_heads; h++) {
        const float *p = x + (int64_t)h * head_dim;                    // (head_dim)
        float *am = obs->absmax[kv] + (int64_t)h * head_dim;           // (head_dim)
        uint64_t *hist = obs->hist[kv] + (int64_t)h * KVCAL_HIST_BINS; // (bins)
        float m = obs->batch_absmax[kv][h];
        for (int c = 0; c < head_dim; c++) {
            const float a = fabsf(p[c]);
            am[c] = max_nan_wins(am[c], a);
            m = max_nan_wins(m, a);
            hist[kvcal_hist_bin(a)]++;
        }
        obs->batch_absmax[kv][h] = m;
    }
}

void kvcal_rope_observe_ref(float *qkv, int64_t token_stride, const int32_t *pos,
                            int tokens, int n_heads, int n_kv_heads, int head_dim,
                            const kvcal_rope_ref_cfg *rope, const kvcal_kv_observer *obs)
{
    const int qk_heads = n_heads + n_kv_heads;
    for (int t = 0; t < tokens; t++) {
        if (pos[t] < 0)
            continue;
        float *row = qkv + (int64_t)t * token_stride; // (heads + 2 kv_heads, head_dim)
        for (int h = 0; h < qk_heads; h++) {
            const float *w = h < n_heads ? rope->q_norm_w : rope->k_norm_w;
            float *x = row + (int64_t)h * head_dim; // (head_dim)
            if (w)
                kvcal_rmsnorm_ref(x, x, w, 1, head_dim, rope->norm_eps);
        }
        kvcal_rope_scaled_ref(row, pos + t, rope->inv_freq, 1, qk_heads, head_dim,
                              rope->rot_dim, rope->interleaved, rope->attention_factor);
        for (int h = 0; obs && obs->q_absmax && h < n_heads; h++)
            for (int c = 0; c < head_dim; c++)
                obs->q_absmax[h] =
                    max_nan_wins(obs->q_absmax[h], fabsf(row[(int64_t)h * head_dim + c]));
        if (obs) {
            observe_heads(row + (int64_t)n_heads * head_dim, n_kv_heads, head_dim, obs,
                          KVCAL_K);
            observe_heads(row + (int64_t)qk_heads * head_dim, n_kv_heads, head_dim, obs,
                          KVCAL_V);
        }
    }
}

/* --- attention ----------------------------------------------------------- */

typedef struct {
    float *out;
    const float *q, *k, *v;
    int tokens, n_heads, n_kv_heads, head_dim, v_dim;
    float scale;
    int window;
    float softcap;
    const float *sinks; /* (n_heads) or NULL */
} attn_ctx;

/* One (query token, head): online softmax, the running max subtracted before
 * every exp, accumulated straight into the output row; a head's sink is a
 * first score whose value row is zero. */
static void attention_row(void *p, int64_t item)
{
    const attn_ctx *c = p;
    int t = (int)(item / c->n_heads), h = (int)(item % c->n_heads);
    int kvh = h / (c->n_heads / c->n_kv_heads);
    int d = c->head_dim, dv = c->v_dim;
    const float *qv = c->q + ((int64_t)t * c->n_heads + h) * d; // (head_dim)
    float *o = c->out + ((int64_t)t * c->n_heads + h) * dv;     // (v_dim)
    int64_t kv_stride = (int64_t)c->n_kv_heads * d,
            v_stride = (int64_t)c->n_kv_heads * dv;
    float m = c->sinks ? c->sinks[h] : -INFINITY, l = c->sinks ? 1.0f : 0.0f;
    memset(o, 0, sizeof(float) * (size_t)dv);
    for (int s = c->window > 0 && t >= c->window ? t - c->window + 1 : 0; s <= t; s++) {
        const float *kv = c->k + s * kv_stride + (int64_t)kvh * d; // (head_dim)
        const float *vv = c->v + s * v_stride + (int64_t)kvh * dv; // (v_dim)
        float score = dot_1x1(qv, kv, d) * c->scale;
        if (c->softcap > 0.0f)
            score = c->softcap * tanhf(score / c->softcap);
        if (score > m) {
            float r = expf(m - score);
            l *= r;
            for (int i = 0; i < dv; i++)
                o[i] *= r;
            m = score;
        }
        float e = expf(score - m);
        l += e;
        for (int i = 0; i < dv; i++)
            o[i] += e * vv[i];
    }
    float inv = 1.0f / l;
    for (int i = 0; i < dv; i++)
        o[i] *= inv;
}

static void attention_run(attn_ctx *c)
{
    double flops =
        1.0 * c->tokens * (double)c->tokens * c->n_heads * (c->head_dim + c->v_dim);
    parallel_for(attention_row, c, (int64_t)c->tokens * c->n_heads, flops);
}

void kvcal_attention_sinks_ref(float *out, const float *q, const float *k, const float *v,
                               int tokens, int n_heads, int n_kv_heads, int head_dim,
                               float scale, int window, float softcap, const float *sinks)
{
    attn_ctx c = {out,      q,        k,     v,      tokens,  n_heads, n_kv_heads,
                  head_dim, head_dim, scale, window, softcap, sinks};
    attention_run(&c);
}

void kvcal_attention_vdim_ref(float *out, const float *q, const float *k, const float *v,
                              int tokens, int n_heads, int n_kv_heads, int qk_dim,
                              int v_dim, float scale, int window, float softcap)
{
    attn_ctx c = {out,    q,     k,     v,      tokens,  n_heads, n_kv_heads,
                  qk_dim, v_dim, scale, window, softcap, NULL};
    attention_run(&c);
}

void kvcal_attention_window_ref(float *out, const float *q, const float *k,
                                const float *v, int tokens, int n_heads, int n_kv_heads,
                                int head_dim, float scale, int window, float softcap)
{
    kvcal_attention_sinks_ref(out, q, k, v, tokens, n_heads, n_kv_heads, head_dim, scale,
                              window, softcap, NULL);
}

void kvcal_attention_ref(float *out, const float *q, const float *k, const float *v,
                         int tokens, int n_heads, int n_kv_heads, int head_dim,
                         float scale)
{
    kvcal_attention_window_ref(out, q, k, v, tokens, n_heads, n_kv_heads, head_dim, scale,
                               0, 0.0f);
}

/* --- mixture of experts --------------------------------------------------- */

/* The group of each expert that may be chosen: the topk_groups best of
 * cfg's groups by their scores (see kvcal_moe_route_cfg), the lower group
 * first on a tie, into open (groups); every group open when groups <= 1.
 * p (num_experts) are the experts' scores (the softmax's probabilities or
 * the choice values of sigmoid scoring). */
static void open_groups(unsigned char *open, const float *p, const kvcal_moe_route_cfg *c)
{
    const int G = c->groups > 1 ? c->groups : 1, S = c->num_experts / G;
    float score[KVCAL_MOE_MAX_GROUPS];
    for (int g = 0; g < G; g++) {
        float a = -INFINITY, b = -INFINITY; /* the two best of the group */
        for (int i = g * S; i < (g + 1) * S; i++) {
            if (p[i] > a)
                b = a, a = p[i];
            else if (p[i] > b)
                b = p[i];
        }
        score[g] = c->group_max || S < 2 ? a : a + b;
        open[g] = G == 1;
    }
    for (int j = 0; G > 1 && j < c->topk_groups; j++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!open[g] && (best < 0 || score[g] > score[best]))
                best = g;
        open[best] = 1;
    }
}

void kvcal_moe_route_grouped_ref(int32_t *experts, float *weights, const float *logits,
                                 int64_t tokens, const kvcal_moe_route_cfg *c)
{
    const int E = c->num_experts, K = c->top_k, G = c->groups > 1 ? c->groups : 1;
    float p[KVCAL_MOE_MAX_EXPERTS];
    unsigned char open[KVCAL_MOE_MAX_GROUPS];
    for (int64_t t = 0; t < tokens; t++) {
        const float *z = logits + t * E; // (num_experts)
        int32_t *e = experts + t * K;    // (top_k)
        float *w = weights + t * K;      // (top_k)
        float m = -INFINITY, sum = 0.0f;
        for (int i = 0; !c->sigmoid && i < E; i++)
            m = z[i] > m ? z[i] : m;
        for (int i = 0; !c->sigmoid && i < E; i++)
            sum += expf(z[i] - m);
        for (int i = 0; G > 1 && i < E; i++)
            p[i] = (c->sigmoid ? kvcal_sigmoid_ref(z[i]) : expf(z[i] - m) / sum) +
                   (c->bias ? c->bias[i] : 0.0f);
        open_groups(open, p, c);
        /* top_k by selection on the choice values: the largest first, the
         * lower index on a tie (torch.topk's order for distinct values) */
        float chosen = 0.0f;
        for (int j = 0; j < K; j++) {
            int best = -1;
            float best_v = 0.0f;
            for (int i = 0; i < E; i++) {
                int taken = !open[i / (E / G)];
                for (int q = 0; q < j; q++)
                    taken |= e[q] == i;
                /* softmax without a bias: by logit (the same order) */
                const float v =
                    c->sigmoid ? kvcal_sigmoid_ref(z[i]) + (c->bias ? c->bias[i] : 0.0f)
                    : c->bias  ? expf(z[i] - m) / sum + c->bias[i]
                               : z[i];
                if (!taken && (best < 0 || v > best_v))
                    best = i, best_v = v;
            }
            e[j] = best;
            w[j] = c->sigmoid ? kvcal_sigmoid_ref(z[best]) : expf(z[best] - m) / sum;
            chosen += w[j];
        }
        for (int j = 0; j < K; j++) {
            if (c->renormalize)
                w[j] = c->sigmoid ? w[j] / (chosen + 1e-20f) : w[j] / chosen;
            w[j] *= c->scale;
        }
    }
}

void kvcal_moe_route_ref(int32_t *experts, float *weights, const float *logits,
                         int64_t tokens, int num_experts, int top_k, int renormalize)
{
    const kvcal_moe_route_cfg c = {num_experts, top_k, 0,           NULL, 1,
                                   1,           0,     renormalize, 1.0f};
    kvcal_moe_route_grouped_ref(experts, weights, logits, tokens, &c);
}

void kvcal_moe_route_sigmoid_ref(int32_t *experts, float *weights, const float *logits,
                                 const float *bias, int64_t tokens, int num_experts,
                                 int top_k, int renormalize, float scale)
{
    const kvcal_moe_route_cfg c = {num_experts, top_k, 1,           bias, 1,
                                   1,           0,     renormalize, scale};
    kvcal_moe_route_grouped_ref(experts, weights, logits, tokens, &c);
}

/* --- elementwise --------------------------------------------------------- */

void kvcal_embed_ref(float *out, const float *table, const int32_t *ids, int64_t n,
                     int dim)
{
    for (int64_t i = 0; i < n; i++) {
        float *o = out + i * dim; // (dim)
        if (ids[i] < 0)
            memset(o, 0, (size_t)dim * sizeof *o);
        else
            memcpy(o, table + (int64_t)ids[i] * dim, (size_t)dim * sizeof *o);
    }
}

float kvcal_sigmoid_ref(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void kvcal_geglu_ref(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        /* transformers' gelu_pytorch_tanh */
        const float t = tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g));
        out[i] = 0.5f * g * (1.0f + t) * up[i];
    }
}

void kvcal_swiglu_ref(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void kvcal_swiglu_oai_ref(float *out, const float *gate, const float *up, int64_t n,
                          float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
        out[i] = (u + 1.0f) * (g * kvcal_sigmoid_ref(alpha * g));
    }
}

void kvcal_add_ref(float *x, const float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* --- multi-head latent attention ------------------------------------------ */

void kvcal_mla_latent_ref(float *entry, int64_t entry_stride, float *q, int64_t q_stride,
                          const int32_t *pos, int tokens, int n_heads, int qk_dim,
                          int kv_lora_rank, int rope_dim, const float *norm_w, float eps,
                          const float *inv_freq, float attention_factor,
                          const kvcal_kv_observer *obs)
{
    const int L = kv_lora_rank, R = rope_dim;
    for (int t = 0; t < tokens; t++) {
        if (pos[t] < 0)
            continue;
        float *row = entry + (int64_t)t * entry_stride; // (L + R)
        kvcal_rmsnorm_ref(row, row, norm_w, 1, L, eps);
        kvcal_rope_scaled_ref(row + L, pos + t, inv_freq, 1, 1, R, R, 1,
                              attention_factor);
        if (q) /* each head's last R channels: the rotation starts there */
            kvcal_rope_scaled_ref(q + (int64_t)t * q_stride + qk_dim - R, pos + t,
                                  inv_freq, 1, n_heads, qk_dim, R, 1, attention_factor);
        if (obs) {
            observe_heads(row, 1, L + R, obs, KVCAL_K);
            observe_heads(row, 1, L + R, obs, KVCAL_V);
        }
    }
}

void kvcal_mla_expand_ref(float *k, float *v, int v_stride, const float *kvb,
                          const float *entry, int64_t entry_stride, int tokens,
                          int n_heads, int nope, int v_dim, int kv_lora_rank,
                          int rope_dim)
{
    const int qk = nope + rope_dim;
    for (int t = 0; t < tokens; t++) {
        const float *pe = entry + (int64_t)t * entry_stride + kv_lora_rank; // (rope_dim)
        for (int h = 0; h < n_heads; h++) {
            const float *src = kvb + ((int64_t)t * n_heads + h) * (nope + v_dim);
            float *kh = k + ((int64_t)t * n_heads + h) * qk;       // (qk)
            float *vh = v + ((int64_t)t * n_heads + h) * v_stride; // (v_stride)
            memcpy(kh, src, sizeof(float) * (size_t)nope);
            memcpy(kh + nope, pe, sizeof(float) * (size_t)rope_dim);
            memcpy(vh, src + nope, sizeof(float) * (size_t)v_dim);
            memset(vh + v_dim, 0, sizeof(float) * (size_t)(v_stride - v_dim));
        }
    }
}

void kvcal_mla_ds_roundtrip_ref(float *out, int64_t out_stride, const float *x,
                                int64_t x_stride, int64_t rows, int kv_lora_rank,
                                int rope_dim)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * x_stride; // (kv_lora_rank + rope_dim)
        float *o = out + r * out_stride;    // (kv_lora_rank + rope_dim)
        for (int c0 = 0; c0 < kv_lora_rank; c0 += 128) {
            const int c1 = c0 + 128 < kv_lora_rank ? c0 + 128 : kv_lora_rank;
            float amax = 0.0f;
            for (int c = c0; c < c1; c++)
                amax = fmaxf(amax, fabsf(xr[c]));
            const float scale = fmaxf(amax / 448.0f, FLT_MIN);
            for (int c = c0; c < c1; c++)
                o[c] = kvcal_fp8_e4m3_round(xr[c] / scale) * scale;
        }
        for (int c = kv_lora_rank; c < kv_lora_rank + rope_dim; c++)
            o[c] = kvcal_bf16_round(xr[c]);
    }
}
