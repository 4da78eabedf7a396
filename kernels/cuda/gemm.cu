/* kernels/cuda/gemm.cu: bf16 GEMMs with fp32 accumulation through cuBLASLt,
 * the bias added in the epilogue. The algorithm for a shape is chosen once
 * and cached: cuBLASLt's heuristic proposes up to GEMM_CANDIDATES; for a
 * shape of at least GEMM_TUNE_FLOPS the first launch times each on the
 * caller's stream and keeps the fastest (the heuristic's first choice ran
 * the Llama-3-8B down projection at 88% of the matmul ceiling). Candidates
 * are timed in GEMM_TUNE_ROUNDS interleaved rounds, each keeping its best
 * round, so that a clock ramp or a noisy moment does not decide alone.
 *
 * Row-major out (rows, n) = x (rows, k) @ w^T is, in cuBLASLt's column-major
 * terms, out^T (n, rows) = w (k, n)^T @ x^T (k, rows): A = w transposed, B = x,
 * m = n, n = rows; the bias is per row of the column-major result, which is
 * what CUBLASLT_EPILOGUE_BIAS adds.
 *
 * An accumulating GEMM (kvcal_gemm_accumulate_launch: out += x @ w^T + bias,
 * a residual add in the epilogue) is a plan of its own, beta 1 with C the
 * output; its candidates are timed writing the caller's scratch buffer, so
 * that the tuning adds nothing to the output.
 *
 * FP8 GEMMs (kvcal_gemm_fp8_launch) are the same plans with e4m3 A and B
 * and the scale modes of A (the weight) and B (the activation) and the
 * accumulation (fp32, or Hopper's fast accumulation) in the key; a shape
 * and modes cuBLASLt has no algorithm for (modes other than scalar before
 * Hopper, a GPU without FP8 tensor cores) is remembered as such and
 * reported KVCAL_ERR_UNSUPPORTED at once, so that the caller falls back.
 * cuBLASLt's heuristic proposes nothing for the vector and block scale
 * modes while the descriptor holds no scale pointers (scalar modes take
 * NULL as 1.0): a plan asks it with both pointing at the workspace, and
 * each launch sets the real ones.
 *
 * A batched GEMM (kvcal_gemm_batched_launch: batch products of one x with
 * weights w_stride values apart, into columns out_stride apart of one
 * output) is a plan with the batch count and the strides on the layouts
 * (x's batch stride 0: every product reads the same rows) and C's leading
 * dimension ldo. cuBLASLt's heuristic takes A, B, C and D as 256-byte
 * aligned unless told otherwise, and an algorithm's alignment must hold
 * for every batch's pointer, so such a plan tells it what they share (the
 * bytes that divide the base pointer, the batch stride and the leading
 * dimension: part of the plan's key). */
#include <cublasLt.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

enum { GEMM_CACHE = 64, GEMM_CANDIDATES = 16, GEMM_TUNE_REPS = 3, GEMM_TUNE_ROUNDS = 3 };
#define GEMM_TUNE_FLOPS 1e9

/* What a plan is for: the shape, a bias, and for an FP8 GEMM the scale
 * modes (cublasLtMatmulMatrixScale_t) of A and B and fast accumulation;
 * ldx: the activation's rows that many values apart (0: k, packed);
 * accumulate: the output added to (beta 1); a batched GEMM's batch count
 * (0: not batched), the bytes every row of every batch of w, x and out
 * starts on (batch_align; 0: cuBLASLt's default of 256), output rows ldo
 * values apart (0: n), and the batches' strides in values (w's and out's;
 * x's is 0). Compared with memcmp: no padding (the static_assert below). */
typedef struct gemm_key {
    int rows, k, n, bias;
    int fp8, a_mode, b_mode, fast;
    int ldx;
    int accumulate;
    int batch;
    int w_align, x_align, out_align;
    int64_t ldo, w_stride, out_stride;
} gemm_key;
static_assert(sizeof(gemm_key) == 14 * sizeof(int) + 3 * sizeof(int64_t),
              "gemm_key has padding: plans are found by memcmp");

typedef struct gemm_plan {
    gemm_key key;
    int unsupported;            /* cuBLASLt has no algorithm for it */
    cublasStatus_t heur_status; /* what its heuristic answered then */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t
        cand[GEMM_CANDIDATES]; /* the heuristic's proposals, best first */
    int num_cand;
    int chosen; /* the candidate launches use */
    int tuned;  /* chosen is final */
} gemm_plan;

struct kvcal_gemm {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    gemm_plan plans[GEMM_CACHE];
    int num_plans, next_evict;
};

#define LT_TRY(call)                                                                     \
    do {                                                                                 \
        cublasStatus_t st_ = (call);                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                              \
            status =                                                                     \
                kvcal_fail(st_ == CUBLAS_STATUS_ALLOC_FAILED ? KVCAL_ERR_DEVICE_MEMORY   \
                                                             : KVCAL_ERR_CUDA,           \
                           "%s:%d: %s: %s", __FILE__, __LINE__, #call,                   \
                           cublasLtGetStatusString(st_));                                \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

static void plan_release(gemm_plan *p)
{
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof *p);
}

extern "C" kvcal_status kvcal_gemm_create(size_t workspace_bytes, kvcal_gemm_t **out)
{
    kvcal_status status = KVCAL_OK;
    if (!out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "gemm_create: out is NULL");
    *out = NULL;
    kvcal_gemm_t *g = (kvcal_gemm_t *)calloc(1, sizeof *g);
    if (!g)
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "gemm_create: no host memory for the GEMM context");
    LT_TRY(cublasLtCreate(&g->lt));
    {
        /* at least the 256 bytes an FP8 plan's placeholder scales point at */
        cudaError_t err =
            cudaMalloc(&g->workspace, workspace_bytes > 256 ? workspace_bytes : 256);
        if (err != cudaSuccess) {
            status =
                kvcal_fail(kvcal_cuda_status(err),
                           "gemm_create: cudaMalloc of a %zu-byte cuBLASLt workspace: %s",
                           workspace_bytes, cudaGetErrorString(err));
            goto fail;
        }
        g->workspace_bytes = workspace_bytes;
    }
    *out = g;
    return KVCAL_OK;
fail:
    kvcal_gemm_destroy(g);
    return status;
}

extern "C" void kvcal_gemm_destroy(kvcal_gemm_t *g)
{
    if (!g)
        return;
    cudaDeviceSynchronize();
    for (int i = 0; i < g->num_plans; i++)
        plan_release(&g->plans[i]);
    cudaFree(g->workspace);
    if (g->lt)
        cublasLtDestroy(g->lt);
    free(g);
}

/* Builds the descriptors of one shape and asks the heuristic for the best
 * algorithm that fits the workspace. */
static kvcal_status plan_build(kvcal_gemm_t *g, gemm_plan *p, const gemm_key *key)
{
    const int rows = key->rows, k = key->k, n = key->n;
    const double flops = 2.0 * rows * (double)k * n * (key->batch ? key->batch : 1);
    kvcal_status status = KVCAL_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur[GEMM_CANDIDATES];
    int found = 0;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi =
        key->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const cudaDataType_t ab = key->fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    cublasStatus_t hs;
    memset(p, 0, sizeof *p);
    p->key = *key;
    LT_TRY(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                          sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                          sizeof tb));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                          sizeof epi));
    if (key->fp8) {
        const int32_t am = key->a_mode, bm = key->b_mode;
        const int8_t fast = (int8_t)key->fast;
        const void *placeholder = g->workspace; /* the launch sets the real scales */
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                              &am, sizeof am));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                              &bm, sizeof bm));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &placeholder, sizeof placeholder));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &placeholder, sizeof placeholder));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                              &fast, sizeof fast));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&p->a, ab, k, n, k));
    LT_TRY(cublasLtMatrixLayoutCreate(&p->b, ab, k, rows, key->ldx ? key->ldx : k));
    LT_TRY(
        cublasLtMatrixLayoutCreate(&p->c, CUDA_R_16BF, n, rows, key->ldo ? key->ldo : n));
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->workspace_bytes,
        sizeof g->workspace_bytes));
    if (key->batch) {
        const int32_t count = key->batch;
        const int64_t stride[3] = {key->w_stride, 0, key->out_stride};
        const cublasLtMatrixLayout_t layout[3] = {p->a, p->b, p->c};
        for (int i = 0; i < 3; i++) {
            LT_TRY(cublasLtMatrixLayoutSetAttribute(
                layout[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
            LT_TRY(cublasLtMatrixLayoutSetAttribute(
                layout[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride[i],
                sizeof stride[i]));
        }
        const struct {
            cublasLtMatmulPreferenceAttributes_t attr;
            uint32_t bytes;
        } align[4] = {
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)key->w_align},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, (uint32_t)key->x_align},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, (uint32_t)key->out_align},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)key->out_align}};
        for (int i = 0; i < 4; i++)
            LT_TRY(cublasLtMatmulPreferenceSetAttribute(
                pref, align[i].attr, &align[i].bytes, sizeof align[i].bytes));
    }
    hs = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->a, p->b, p->c, p->c, pref,
                                        GEMM_CANDIDATES, heur, &found);
    if (key->fp8 && (hs != CUBLAS_STATUS_SUCCESS || found < 1)) {
        /* kept, so that the next launch of it falls back at once */
        p->unsupported = 1;
        p->heur_status = hs;
        cublasLtMatmulPreferenceDestroy(pref);
        return KVCAL_OK;
    }
    LT_TRY(hs);
    if (found < 1) {
        status = kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "gemm: cuBLASLt has no algorithm for rows %d, k %d, n %d (%d batches)", rows,
            k, n, key->batch ? key->batch : 1);
        goto fail;
    }
    for (int i = 0; i < found; i++)
        p->cand[i] = heur[i].algo;
    p->num_cand = found;
    p->tuned = found == 1 || flops < GEMM_TUNE_FLOPS;
    cublasLtMatmulPreferenceDestroy(pref);
    return KVCAL_OK;
fail:
    cublasLtMatmulPreferenceDestroy(pref);
    plan_release(p);
    return status;
}

static kvcal_status plan_find(kvcal_gemm_t *g, const gemm_key *key, gemm_plan **out)
{
    for (int i = 0; i < g->num_plans; i++) {
        gemm_plan *p = &g->plans[i];
        if (!memcmp(&p->key, key, sizeof *key)) {
            *out = p;
            return KVCAL_OK;
        }
    }
    int slot = g->num_plans;
    if (slot == GEMM_CACHE) {
        slot = g->next_evict;
        g->next_evict = (g->next_evict + 1) % GEMM_CACHE;
        plan_release(&g->plans[slot]);
    } else {
        g->num_plans++;
    }
    kvcal_status st = plan_build(g, &g->plans[slot], key);
    if (st != KVCAL_OK) {
        g->plans[slot] = g->plans[--g->num_plans];
        memset(&g->plans[g->num_plans], 0, sizeof g->plans[0]);
        return st;
    }
    *out = &g->plans[slot];
    return KVCAL_OK;
}

/* D = w x (+ bias) + beta C, beta 1 for an accumulating plan (C the
 * output, read), else 0. */
static cublasStatus_t matmul(kvcal_gemm_t *g, const gemm_plan *p, int c, const void *x,
                             const void *w, const void *in, void *out,
                             cudaStream_t stream)
{
    const float one = 1.0f, beta = p->key.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(g->lt, p->op, &one, w, p->a, x, p->b, &beta, in, p->c, out,
                          p->c, &p->cand[c], g->workspace, g->workspace_bytes, stream);
}

static int run_candidate(kvcal_gemm_t *g, const gemm_plan *p, int c, void *out,
                         void *scratch, const void *x, const void *w, cudaStream_t stream)
{
    return matmul(g, p, c, x, w, out, scratch ? scratch : out, stream) ==
           CUBLAS_STATUS_SUCCESS;
}

/* Times every candidate in GEMM_TUNE_ROUNDS rounds of GEMM_TUNE_REPS runs
 * (after one warm-up run of each), keeps each one's best round and chooses
 * the fastest; candidates that fail to run are passed over. An accumulating
 * plan's runs write scratch, of the output's size (out is read alone).
 * Synchronizes with the stream. */
static kvcal_status plan_tune(kvcal_gemm_t *g, gemm_plan *p, void *out, void *scratch,
                              const void *x, const void *w, cudaStream_t stream)
{
    kvcal_status status = KVCAL_OK;
    cudaEvent_t ev[2] = {NULL, NULL};
    float best_ms[GEMM_CANDIDATES];
    int ok[GEMM_CANDIDATES], best = -1;
    KVCAL_CUDA_TRY(cudaEventCreate(&ev[0]));
    if (cudaEventCreate(&ev[1]) != cudaSuccess) {
        cudaEventDestroy(ev[0]);
        return kvcal_fail(KVCAL_ERR_CUDA, "gemm: cudaEventCreate failed");
    }
    for (int c = 0; c < p->num_cand; c++)
        ok[c] = run_candidate(g, p, c, out, scratch, x, w, stream);
    for (int round = 0; round < GEMM_TUNE_ROUNDS; round++)
        for (int c = 0; c < p->num_cand; c++) {
            float ms = 0.0f;
            ok[c] = ok[c] && cudaEventRecord(ev[0], stream) == cudaSuccess;
            for (int r = 0; ok[c] && r < GEMM_TUNE_REPS; r++)
                ok[c] = run_candidate(g, p, c, out, scratch, x, w, stream);
            ok[c] = ok[c] && cudaEventRecord(ev[1], stream) == cudaSuccess &&
                    cudaEventSynchronize(ev[1]) == cudaSuccess &&
                    cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess;
            if (ok[c] && (round == 0 || ms < best_ms[c]))
                best_ms[c] = ms;
        }
    for (int c = 0; c < p->num_cand; c++)
        if (ok[c] && (best < 0 || best_ms[c] < best_ms[best]))
            best = c;
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    if (best < 0)
        status = kvcal_fail(
            KVCAL_ERR_CUDA,
            "gemm: none of cuBLASLt's %d algorithms ran for rows %d, k %d, n %d",
            p->num_cand, p->key.rows, p->key.k, p->key.n);
    else
        p->chosen = best;
    p->tuned = 1;
    return status;
}

/* KVCAL_ERR_UNSUPPORTED for plan p, which cuBLASLt runs no algorithm of. */
static kvcal_status unsupported(const gemm_plan *p)
{
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                      "gemm: cuBLASLt has no FP8 algorithm for rows %d, k %d, n %d with "
                      "scale modes %d (weight) and %d (activation)%s on this GPU (its "
                      "heuristic: %s)",
                      p->key.rows, p->key.k, p->key.n, p->key.a_mode, p->key.b_mode,
                      p->key.fast ? " and fast accumulation" : "",
                      p->heur_status == CUBLAS_STATUS_SUCCESS
                          ? "no algorithm"
                          : cublasLtGetStatusString(p->heur_status));
}

/* One GEMM of plan `key` with candidate `candidate` (-1: the chosen one);
 * w_scale, x_scale: the FP8 scale pointers (NULL for bf16); scratch: an
 * accumulating plan's buffer for its tuning (else NULL). */
static kvcal_status gemm_run(kvcal_gemm_t *g, const gemm_key *key, int candidate,
                             void *out, void *scratch, const void *x, const void *w,
                             const kvcal_bf16 *bias, const float *x_scale,
                             const float *w_scale, cudaStream_t stream, int *count,
                             int *chosen)
{
    kvcal_status status = KVCAL_OK;
    gemm_plan *p = NULL;
    if (!g || !out || !x || !w || key->rows < 0 || key->k <= 0 || key->n <= 0)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm: rows %d, k %d, n %d: need a context, buffers, rows >= 0 "
                          "and k, n > 0",
                          key->rows, key->k, key->n);
    if (key->rows == 0)
        return KVCAL_OK;
    status = plan_find(g, key, &p);
    if (status != KVCAL_OK)
        return status;
    if (p->unsupported)
        return unsupported(p);
    if (candidate < -1 || candidate >= p->num_cand)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm: candidate %d of rows %d, k %d, n %d: cuBLASLt proposed "
                          "%d (0 .. %d, or -1 for the chosen one)",
                          candidate, key->rows, key->k, key->n, p->num_cand,
                          p->num_cand - 1);
    if (bias)
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                              &bias, sizeof bias));
    if (key->fp8) {
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &w_scale, sizeof w_scale));
        LT_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &x_scale, sizeof x_scale));
    }
    if (!p->tuned && (status = plan_tune(g, p, out, scratch, x, w, stream)) != KVCAL_OK)
        return status;
    LT_TRY(matmul(g, p, candidate < 0 ? p->chosen : candidate, x, w, out, out, stream));
    if (count)
        *count = p->num_cand;
    if (chosen)
        *chosen = p->chosen;
    return KVCAL_OK;
fail:
    return status;
}

extern "C" kvcal_status kvcal_gemm_launch_candidate(kvcal_gemm_t *g, int candidate,
                                                    kvcal_bf16 *out, const kvcal_bf16 *x,
                                                    const kvcal_bf16 *w,
                                                    const kvcal_bf16 *bias, int rows,
                                                    int k, int n, cudaStream_t stream,
                                                    int *count, int *chosen)
{
    const gemm_key key = {rows, k, n, bias != NULL, 0, 0, 0, 0};
    return gemm_run(g, &key, candidate, out, NULL, x, w, bias, NULL, NULL, stream, count,
                    chosen);
}

static int scale_mode(kvcal_gemm_scale s)
{
    switch (s) {
    case KVCAL_GEMM_SCALE_OUTER_VEC:
        return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case KVCAL_GEMM_SCALE_VEC128:
        return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case KVCAL_GEMM_SCALE_BLK128x128:
        return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default:
        return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

extern "C" int kvcal_gemm_fp8_runs(kvcal_gemm_t *g, int rows, int k, int n, int bias,
                                   kvcal_gemm_scale x_mode, kvcal_gemm_scale w_mode,
                                   int fast_accum)
{
    const gemm_key key = {
        rows,           k, n, bias != 0, 1, scale_mode(w_mode), scale_mode(x_mode),
        fast_accum != 0};
    gemm_plan *p = NULL;
    if (!g || rows <= 0 || k <= 0 || n <= 0 || plan_find(g, &key, &p) != KVCAL_OK)
        return 0;
    if (p->unsupported)
        unsupported(p); /* the reason, for kvcal_last_error() */
    return !p->unsupported;
}

extern "C" kvcal_status kvcal_gemm_fp8_launch_candidate(
    kvcal_gemm_t *g, int candidate, kvcal_bf16 *out, const uint8_t *xq,
    const float *x_scale, kvcal_gemm_scale x_mode, const uint8_t *wq, const float *w_scale,
    kvcal_gemm_scale w_mode, int fast_accum, const kvcal_bf16 *bias, int rows, int k, int n,
    cudaStream_t stream, int *count, int *chosen)
{
    if (!x_scale || !w_scale)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "gemm_fp8: scale pointers are NULL");
    /* cuBLASLt ran none of its FP8 algorithms on a scale 4 bytes off a
     * 16-byte boundary (every candidate failed at launch): said here, before
     * it is asked, instead of as "none of cuBLASLt's algorithms ran" */
    const struct {
        const char *name;
        const float *scale;
    } scales[2] = {{"the activation's", x_scale}, {"the weight's", w_scale}};
    for (int i = 0; i < 2; i++)
        if ((uintptr_t)scales[i].scale % 16)
            return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                              "gemm_fp8: %s scales at %p are not 16-byte aligned (cuBLASLt's "
                              "FP8 algorithms do not run on them): allocate them on a "
                              "16-byte boundary",
                              scales[i].name, (const void *)scales[i].scale);
    const gemm_key key = {
        rows,           k, n, bias != NULL, 1, scale_mode(w_mode), scale_mode(x_mode),
        fast_accum != 0};
    return gemm_run(g, &key, candidate, out, NULL, xq, wq, bias, x_scale, w_scale, stream,
                    count, chosen);
}

extern "C" kvcal_status
kvcal_gemm_fp8_launch(kvcal_gemm_t *g, kvcal_bf16 *out, const uint8_t *xq,
                      const float *x_scale, kvcal_gemm_scale x_mode, const uint8_t *wq,
                      const float *w_scale, kvcal_gemm_scale w_mode, int fast_accum,
                      const kvcal_bf16 *bias, int rows, int k, int n, cudaStream_t stream)
{
    return kvcal_gemm_fp8_launch_candidate(g, -1, out, xq, x_scale, x_mode, wq, w_scale,
                                           w_mode, fast_accum, bias, rows, k, n, stream,
                                           NULL, NULL);
}

extern "C" kvcal_status kvcal_gemm_launch(kvcal_gemm_t *g, kvcal_bf16 *out,
                                          const kvcal_bf16 *x, const kvcal_bf16 *w,
                                          const kvcal_bf16 *bias, int rows, int k, int n,
                                          cudaStream_t stream)
{
    return kvcal_gemm_launch_candidate(g, -1, out, x, w, bias, rows, k, n, stream, NULL,
                                       NULL);
}

extern "C" kvcal_status kvcal_gemm_accumulate_launch(kvcal_gemm_t *g, kvcal_bf16 *out,
                                                     kvcal_bf16 *scratch,
                                                     const kvcal_bf16 *x,
                                                     const kvcal_bf16 *w,
                                                     const kvcal_bf16 *bias, int rows,
                                                     int k, int n, cudaStream_t stream)
{
    if (!scratch || scratch == out)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm: an accumulating GEMM needs a scratch buffer apart from "
                          "its output");
    const gemm_key key = {rows, k, n, bias != NULL, 0, 0, 0, 0, 0, 1};
    return gemm_run(g, &key, -1, out, scratch, x, w, bias, NULL, NULL, stream, NULL,
                    NULL);
}

extern "C" kvcal_status kvcal_gemm_launch_ld(kvcal_gemm_t *g, kvcal_bf16 *out,
                                             const kvcal_bf16 *x, int64_t ldx,
                                             const kvcal_bf16 *w, const kvcal_bf16 *bias,
                                             int rows, int k, int n, cudaStream_t stream)
{
    if (ldx < k || ldx > INT32_MAX)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "gemm: x's rows %lld values apart for k %d: need at least k "
                          "(and below 2^31)",
                          (long long)ldx, k);
    /* packed rows share the plan of kvcal_gemm_launch */
    const gemm_key key = {rows, k, n, bias != NULL, 0, 0, 0, 0, ldx == k ? 0 : (int)ldx};
    return gemm_run(g, &key, -1, out, NULL, x, w, bias, NULL, NULL, stream, NULL, NULL);
}

/* The bytes (a power of two, at most 256) that every row of every batch of
 * an operand starts on: base + b * stride + i * ld bf16 values. */
static int batch_align(const void *base, int64_t stride, int batch, int64_t ld)
{
    const uintptr_t bits = (uintptr_t)base |
                           (batch > 1 ? (uintptr_t)stride * sizeof(kvcal_bf16) : 0) |
                           (uintptr_t)ld * sizeof(kvcal_bf16) | 256u;
    return (int)(bits & (~bits + 1));
}

extern "C" kvcal_status kvcal_gemm_batched_launch(kvcal_gemm_t *g, kvcal_bf16 *out,
                                                  int64_t ldo, int64_t out_stride,
                                                  const kvcal_bf16 *x, int64_t ldx,
                                                  const kvcal_bf16 *w, int64_t w_stride,
                                                  int rows, int k, int n, int batch,
                                                  cudaStream_t stream)
{
    if (batch < 1 || ldx < k || ldx > INT32_MAX || (batch > 1 && out_stride < n) ||
        w_stride < 0 || ldo < (int64_t)(batch - 1) * out_stride + n)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "gemm_batched: %d batches of rows %d, k %d, n %d (x's rows %lld "
            "apart, out's %lld; batches %lld apart in out, %lld in w): need "
            "batch >= 1, k <= ldx < 2^31, out_stride >= n (batches over 1), "
            "w_stride >= 0 and ldo >= (batch - 1) out_stride + n",
            batch, rows, k, n, (long long)ldx, (long long)ldo, (long long)out_stride,
            (long long)w_stride);
    /* one batch needs no strides: the plan of any */
    const int one = batch == 1;
    const gemm_key key = {rows,
                          k,
                          n,
                          0,
                          0,
                          0,
                          0,
                          0,
                          ldx == k ? 0 : (int)ldx,
                          0,
                          batch,
                          batch_align(w, w_stride, batch, k),
                          batch_align(x, 0, batch, ldx),
                          batch_align(out, out_stride, batch, ldo),
                          ldo == n ? 0 : ldo,
                          one ? 0 : w_stride,
                          one ? 0 : out_stride};
    return gemm_run(g, &key, -1, out, NULL, x, w, NULL, NULL, NULL, stream, NULL, NULL);
}
