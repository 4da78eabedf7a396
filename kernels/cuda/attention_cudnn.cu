/* kernels/cuda/attention_cudnn.cu: causal prefill attention through cuDNN's
 * fused flash attention, kvcal's kernel as the fallback (see
 * attention_cudnn.h). Host code only.
 *
 * The operation graph is the one cuDNN's runtime-fusion flash-attention
 * engines match on Hopper (cuDNN 9.x before the single SDPA operation took
 * masks), over the views of the fused QKV buffer:
 *   S  = Q (b, h, s, d) x K^T (b, h_kv, d, s)          fp32, GQA by broadcast
 *   S' = S * scale                                     (by-value scalar)
 *   S''= row >= col ? S' : -inf                         GEN_INDEX x2, CMP_GE,
 *                                                       BINARY_SELECT
 *   M  = max_col S'', E = exp(S'' - M), Z = sum_col E   reductions, pointwise
 *   L  = M + log Z                                      softmax statistics
 *                                                       (virtual unless an
 *                                                       engine needs them)
 *   P  = E / Z                                          bf16
 *   O  = P (b, h, s, s) x V (b, h_kv, s, d_v)           bf16, row stride
 *                                                       out_stride
 * d_v is d but for kvcal_attention_run_qk_v (MLA: d 192, d_v 128), whose K
 * and V have their own row and head strides. cuDNN is reached only through the
 * function pointers resolved from libcudnn.so.9, so the library links
 * without it. */
#include "kernels/cuda/attention_cudnn.h"

#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define KVCAL_HAVE_CUDNN 1
#else
#define KVCAL_HAVE_CUDNN 0
#endif

enum { NOTE_LEN = 512 };

/* A call's shape: Q rows of q_stride values with heads head_dim apart, K
 * rows of k_stride values with heads k_head apart, V rows of v_stride
 * values with heads v_head apart (v_dim values each), output rows of
 * out_stride with heads v_dim apart; lse 1: the caller takes the softmax
 * statistics. */
typedef struct {
    int batch, seq_len, heads, kv_heads, head_dim, v_dim;
    int64_t q_stride, k_stride, k_head, v_stride, v_head, out_stride;
    int lse;
} att_shape;

static int same_shape(const att_shape *a, const att_shape *b)
{
    return a->batch == b->batch && a->seq_len == b->seq_len && a->heads == b->heads &&
           a->kv_heads == b->kv_heads && a->head_dim == b->head_dim &&
           a->v_dim == b->v_dim && a->q_stride == b->q_stride &&
           a->k_stride == b->k_stride && a->k_head == b->k_head &&
           a->v_stride == b->v_stride && a->v_head == b->v_head &&
           a->out_stride == b->out_stride && a->lse == b->lse;
}

/* "B x S tokens, H/HK heads, head_dim D" and ", V's head_dim DV" where it
 * differs, into buf. */
static void shape_text(char *buf, size_t len, const att_shape *e)
{
    int n = snprintf(buf, len, "%d x %d tokens, %d/%d heads, head_dim %d", e->batch,
                     e->seq_len, e->heads, e->kv_heads, e->head_dim);
    if (e->v_dim != e->head_dim && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", V's head_dim %d", e->v_dim);
}

/* Records one line into note (printf-style). */
static void set_note(char *note, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(note, NOTE_LEN, fmt, ap);
    va_end(ap);
}

#if KVCAL_HAVE_CUDNN

enum {
    MAX_PLANS = 8,     /* shapes kept */
    MAX_DESCS = 96,    /* backend descriptors of one shape's graph and plan */
    MAX_CONFIGS = 8,   /* engine configurations tried per heuristics mode */
    WS_ALIGN = 256,    /* the statistics follow cuDNN's scratch at this alignment */
    UID_VIRTUAL = 100, /* first unique id of the graph's virtual tensors */
};

/* Unique ids of the tensors the variant pack binds. */
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, UID_NEG_INF, UID_STATS };

/* The cuDNN entry points kvcal uses. */
typedef struct {
    void *lib;
    decltype(&cudnnGetVersion) GetVersion;
    decltype(&cudnnGetErrorString) GetErrorString;
    decltype(&cudnnCreate) Create;
    decltype(&cudnnDestroy) Destroy;
    decltype(&cudnnSetStream) SetStream;
    decltype(&cudnnBackendCreateDescriptor) CreateDescriptor;
    decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor;
    decltype(&cudnnBackendSetAttribute) SetAttribute;
    decltype(&cudnnBackendGetAttribute) GetAttribute;
    decltype(&cudnnBackendFinalize) Finalize;
    decltype(&cudnnBackendExecute) Execute;
    /* optional (cuDNN names the failed check): NULL when absent */
    decltype(&cudnnGetLastErrorString) GetLastErrorString;
} cudnn_api;

/* One shape: its key, and its plan with every descriptor the plan was built
 * from (kept alive as long as the plan). */
typedef struct {
    int used, ok; /* ok 0: cuDNN refused the shape, calls take kvcal's kernel */
    att_shape shape;
    int with_stats;    /* the plan writes the softmax statistics */
    int64_t workspace; /* bytes of cuDNN scratch */
    int n_descs;
    cudnnBackendDescriptor_t descs[MAX_DESCS];
    cudnnBackendDescriptor_t plan; /* one of descs */
} plan_entry;

struct kvcal_attention {
    int version; /* cuDNN's, 0: not loaded */
    char note[NOTE_LEN];
    cudnn_api api;
    cudnnHandle_t handle;
    plan_entry plans[MAX_PLANS];
    int next; /* slot the next new shape takes */
    void *workspace; /* device: cuDNN scratch, then the statistics when needed */
    size_t workspace_bytes;
    float scale, neg_inf; /* by-value scalars the variant pack points at */
};

// --- loading -------------------------------------------------------------------

static void unload(kvcal_attention_t *a)
{
    if (a->handle)
        a->api.Destroy(a->handle);
    a->handle = NULL;
    if (a->api.lib)
        dlclose(a->api.lib);
    memset(&a->api, 0, sizeof a->api);
    a->version = 0;
}

#define RESOLVE(field, name)                                                             \
    ((*(void **)&a->api.field = dlsym(a->api.lib, name)) != NULL)

static void load(kvcal_attention_t *a)
{
    a->api.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!a->api.lib) {
        set_note(a->note, "cuDNN not loaded (%s): attention runs on kvcal's kernel",
                 dlerror());
        return;
    }
    if (!(RESOLVE(GetVersion, "cudnnGetVersion") &&
          RESOLVE(GetErrorString, "cudnnGetErrorString") &&
          RESOLVE(Create, "cudnnCreate") && RESOLVE(Destroy, "cudnnDestroy") &&
          RESOLVE(SetStream, "cudnnSetStream") &&
          RESOLVE(CreateDescriptor, "cudnnBackendCreateDescriptor") &&
          RESOLVE(DestroyDescriptor, "cudnnBackendDestroyDescriptor") &&
          RESOLVE(SetAttribute, "cudnnBackendSetAttribute") &&
          RESOLVE(GetAttribute, "cudnnBackendGetAttribute") &&
          RESOLVE(Finalize, "cudnnBackendFinalize") &&
          RESOLVE(Execute, "cudnnBackendExecute"))) {
        set_note(a->note, "cuDNN not used: libcudnn.so.9 lacks %s", dlerror());
        unload(a);
        return;
    }
    *(void **)&a->api.GetLastErrorString = dlsym(a->api.lib, "cudnnGetLastErrorString");
    const size_t v = a->api.GetVersion();
    // 9.10.0 and 9.10.1 compute bf16 attention wrongly on some shapes
    if (v < 90000 || v >= 100000 || v == 91000 || v == 91001) {
        set_note(a->note, "cuDNN %zu not used: needs 9.x other than 9.10.0 and 9.10.1", v);
        unload(a);
        return;
    }
    const cudnnStatus_t st = a->api.Create(&a->handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        set_note(a->note, "cuDNN %zu not used: cudnnCreate: %s", v,
                 a->api.GetErrorString(st));
        a->handle = NULL;
        unload(a);
        return;
    }
    a->version = (int)v;
    set_note(a->note, "cuDNN %d.%d.%d loaded", a->version / 10000,
             a->version / 100 % 100, a->version % 100);
}

#undef RESOLVE

// --- graph building ------------------------------------------------------------

/* Builds descriptors into one plan_entry; after the first failure every step
 * is a no-op and `step` names what failed. */
typedef struct {
    const cudnn_api *api;
    plan_entry *e;
    cudnnStatus_t st;
    const char *cur, *step;
    int64_t next_uid;
} builder;

static void check(builder *b, cudnnStatus_t st)
{
    if (b->st == CUDNN_STATUS_SUCCESS && st != CUDNN_STATUS_SUCCESS) {
        b->st = st;
        b->step = b->cur;
    }
}

static cudnnBackendDescriptor_t make(builder *b, cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d = NULL;
    if (b->st != CUDNN_STATUS_SUCCESS)
        return NULL;
    if (b->e->n_descs == MAX_DESCS) {
        check(b, CUDNN_STATUS_INTERNAL_ERROR);
        return NULL;
    }
    check(b, b->api->CreateDescriptor(type, &d));
    if (b->st == CUDNN_STATUS_SUCCESS)
        b->e->descs[b->e->n_descs++] = d;
    return d;
}

static void set(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t n, const void *values)
{
    if (b->st == CUDNN_STATUS_SUCCESS)
        check(b, b->api->SetAttribute(d, name, type, n, values));
}

static void set_desc(builder *b, cudnnBackendDescriptor_t d,
                     cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value)
{
    set(b, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

static void finalize(builder *b, cudnnBackendDescriptor_t d)
{
    if (b->st == CUDNN_STATUS_SUCCESS)
        check(b, b->api->Finalize(d));
}

/* A 4-d tensor; uid 0 takes the next virtual id. */
static cudnnBackendDescriptor_t tensor(builder *b, const char *name, int64_t uid,
                                       cudnnDataType_t type, const int64_t dim[4],
                                       const int64_t stride[4], bool is_virtual,
                                       bool by_value)
{
    b->cur = name;
    const int64_t align = 16, id = uid ? uid : b->next_uid++;
    cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value)
        set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(b, t);
    return t;
}

/* y = mode(x, b2, t) computed in `prec`; axis < 0: none (GEN_INDEX takes it). */
static cudnnBackendDescriptor_t pointwise(builder *b, const char *name,
                                          cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                          int64_t axis, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t b2,
                                          cudnnBackendDescriptor_t t,
                                          cudnnBackendDescriptor_t y)
{
    b->cur = name;
    cudnnBackendDescriptor_t pw = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0)
        set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(b, pw);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b2)
        set_desc(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b2);
    if (t)
        set_desc(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    finalize(b, op);
    return op;
}

/* y = reduce(x) over the dimensions where y has size 1, in fp32. */
static cudnnBackendDescriptor_t reduction(builder *b, const char *name,
                                          cudnnReduceTensorOp_t mode,
                                          cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t y)
{
    b->cur = name;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(b, r);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    finalize(b, op);
    return op;
}

/* c = a x b (batched over the first two dimensions), fp32 accumulation. */
static cudnnBackendDescriptor_t matmul(builder *b, const char *name,
                                       cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t y,
                                       cudnnBackendDescriptor_t c)
{
    b->cur = name;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(b, mm);
    cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, x);
    set_desc(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, y);
    set_desc(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    finalize(b, op);
    return op;
}

/* The finalized operation graph of e's shape (see the top of the file). */
static cudnnBackendDescriptor_t build_graph(builder *b, cudnnHandle_t handle)
{
    const att_shape *e = &b->e->shape;
    const int64_t B = e->batch, H = e->heads, HK = e->kv_heads, S = e->seq_len,
                  D = e->head_dim, DV = e->v_dim, lq = e->q_stride, lk = e->k_stride,
                  lv = e->v_stride, lo = e->out_stride;
    const int64_t q_dim[4] = {B, H, S, D}, q_str[4] = {S * lq, D, lq, 1};
    const int64_t kt_dim[4] = {B, HK, D, S}, kt_str[4] = {S * lk, e->k_head, 1, lk};
    const int64_t v_dim[4] = {B, HK, S, DV}, v_str[4] = {S * lv, e->v_head, lv, 1};
    const int64_t o_dim[4] = {B, H, S, DV}, o_str[4] = {S * lo, DV, lo, 1};
    const int64_t s_dim[4] = {B, H, S, S}, s_str[4] = {H * S * S, S * S, S, 1};
    const int64_t r_dim[4] = {B, H, S, 1}, r_str[4] = {H * S, S, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    const cudnnDataType_t bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT,
                          i32 = CUDNN_DATA_INT32, boolean = CUDNN_DATA_BOOLEAN;

    cudnnBackendDescriptor_t q = tensor(b, "tensor Q", UID_Q, bf16, q_dim, q_str, false, false);
    cudnnBackendDescriptor_t kt = tensor(b, "tensor K^T", UID_K, bf16, kt_dim, kt_str, false, false);
    cudnnBackendDescriptor_t v = tensor(b, "tensor V", UID_V, bf16, v_dim, v_str, false, false);
    cudnnBackendDescriptor_t o = tensor(b, "tensor O", UID_O, bf16, o_dim, o_str, false, false);
    cudnnBackendDescriptor_t scale = tensor(b, "scalar scale", UID_SCALE, f32, one, one, false, true);
    cudnnBackendDescriptor_t neg_inf = tensor(b, "scalar -inf", UID_NEG_INF, f32, one, one, false, true);
    cudnnBackendDescriptor_t stats = tensor(b, "tensor stats", UID_STATS, f32, r_dim, r_str, !b->e->with_stats, false);
    cudnnBackendDescriptor_t s = tensor(b, "S", 0, f32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t s_scaled = tensor(b, "S scaled", 0, f32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t row = tensor(b, "row index", 0, i32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t col = tensor(b, "column index", 0, i32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t keep = tensor(b, "causal mask", 0, boolean, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t s_masked = tensor(b, "S masked", 0, f32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t m = tensor(b, "row max", 0, f32, r_dim, r_str, true, false);
    cudnnBackendDescriptor_t centred = tensor(b, "S - max", 0, f32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t ex = tensor(b, "exp", 0, f32, s_dim, s_str, true, false);
    cudnnBackendDescriptor_t z = tensor(b, "row sum", 0, f32, r_dim, r_str, true, false);
    cudnnBackendDescriptor_t log_z = tensor(b, "log row sum", 0, f32, r_dim, r_str, true, false);
    cudnnBackendDescriptor_t p = tensor(b, "P", 0, bf16, s_dim, s_str, true, false);

    cudnnBackendDescriptor_t ops[] = {
        matmul(b, "matmul Q K^T", q, kt, s),
        pointwise(b, "scale", CUDNN_POINTWISE_MUL, f32, -1, s, scale, NULL, s_scaled),
        pointwise(b, "row index", CUDNN_POINTWISE_GEN_INDEX, f32, 2, s_scaled, NULL, NULL, row),
        pointwise(b, "column index", CUDNN_POINTWISE_GEN_INDEX, f32, 3, s_scaled, NULL, NULL, col),
        pointwise(b, "row >= column", CUDNN_POINTWISE_CMP_GE, boolean, -1, row, col, NULL, keep),
        pointwise(b, "causal select", CUDNN_POINTWISE_BINARY_SELECT, f32, -1, s_scaled, neg_inf, keep, s_masked),
        reduction(b, "row max", CUDNN_REDUCE_TENSOR_MAX, s_masked, m),
        pointwise(b, "S - max", CUDNN_POINTWISE_SUB, f32, -1, s_masked, m, NULL, centred),
        pointwise(b, "exp", CUDNN_POINTWISE_EXP, f32, -1, centred, NULL, NULL, ex),
        reduction(b, "row sum", CUDNN_REDUCE_TENSOR_ADD, ex, z),
        pointwise(b, "log", CUDNN_POINTWISE_LOG, f32, -1, z, NULL, NULL, log_z),
        pointwise(b, "stats", CUDNN_POINTWISE_ADD, f32, -1, m, log_z, NULL, stats),
        pointwise(b, "softmax", CUDNN_POINTWISE_DIV, f32, -1, ex, z, NULL, p),
        matmul(b, "matmul P V", p, v, o),
    };
    b->cur = "operation graph";
    cudnnBackendDescriptor_t graph = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        (int64_t)(sizeof ops / sizeof ops[0]), ops);
    set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(b, graph);
    return graph;
}

/* cuDNN's message for the last failure: status, and its own detail when the
 * library offers one. */
static void describe_failure(const kvcal_attention_t *a, const char *step,
                             cudnnStatus_t st, char *buf, size_t len)
{
    char detail[256] = "";
    if (a->api.GetLastErrorString)
        a->api.GetLastErrorString(detail, sizeof detail);
    snprintf(buf, len, "%s: %s%s%s", step, a->api.GetErrorString(st),
             detail[0] ? ": " : "", detail);
}

/* Asks cuDNN's heuristics (mode A, then the fallback list) for engines of
 * `graph` and keeps the first that finalizes into a plan; 0 when none does. */
static int choose_plan(kvcal_attention_t *a, builder *b, cudnnBackendDescriptor_t graph,
                       int64_t *engine)
{
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2 && b->st == CUDNN_STATUS_SUCCESS; mi++) {
        b->cur = "engine heuristics";
        cudnnBackendDescriptor_t heur = make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        set_desc(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
        set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
        finalize(b, heur);
        int64_t count = 0;
        if (b->st == CUDNN_STATUS_SUCCESS)
            check(b, a->api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL));
        if (count > MAX_CONFIGS)
            count = MAX_CONFIGS;
        cudnnBackendDescriptor_t cfg[MAX_CONFIGS];
        for (int64_t i = 0; i < count; i++)
            cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        if (b->st == CUDNN_STATUS_SUCCESS && count > 0)
            check(b, a->api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
        for (int64_t i = 0; i < got && b->st == CUDNN_STATUS_SUCCESS; i++) {
            b->cur = "execution plan";
            cudnnBackendDescriptor_t plan = make(b, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            set(b, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle);
            set_desc(b, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i]);
            if (b->st != CUDNN_STATUS_SUCCESS)
                break;
            const cudnnStatus_t st = a->api.Finalize(plan);
            if (st != CUDNN_STATUS_SUCCESS) { // this engine refuses: try the next one
                describe_failure(a, "every engine's execution plan", st, a->note, NOTE_LEN);
                continue;
            }
            int64_t n = 0;
            check(b, a->api.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &n, &b->e->workspace));
            cudnnBackendDescriptor_t eng = make(b, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            if (b->st == CUDNN_STATUS_SUCCESS &&
                a->api.GetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                    &eng) == CUDNN_STATUS_SUCCESS)
                a->api.GetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                    1, &n, engine);
            b->e->plan = plan;
            return b->st == CUDNN_STATUS_SUCCESS;
        }
    }
    return 0;
}

/* Destroys the descriptors of e's graph and plan; the shape stays. */
static void drop_plan(const kvcal_attention_t *a, plan_entry *e)
{
    for (int i = e->n_descs - 1; i >= 0; i--)
        a->api.DestroyDescriptor(e->descs[i]);
    e->n_descs = 0;
    e->plan = NULL;
    e->ok = 0;
    e->workspace = 0;
}

/* Builds e's plan, without the statistics output first (unless the caller
 * takes them), then with it; on failure e->ok stays 0 and the note says
 * why. */
static void plan_shape(kvcal_attention_t *a, plan_entry *e)
{
    char why[2][NOTE_LEN], shape[160];
    shape_text(shape, sizeof shape, &e->shape);
    snprintf(why[0], NOTE_LEN, "the caller takes the statistics");
    for (int with_stats = e->shape.lse; with_stats < 2; with_stats++) {
        drop_plan(a, e);
        e->with_stats = with_stats;
        builder b = {&a->api, e, CUDNN_STATUS_SUCCESS, "", "", UID_VIRTUAL};
        int64_t engine = -1;
        a->note[0] = '\0';
        cudnnBackendDescriptor_t graph = build_graph(&b, a->handle);
        if (b.st == CUDNN_STATUS_SUCCESS && choose_plan(a, &b, graph, &engine)) {
            e->ok = 1;
            set_note(a->note, "cuDNN %d.%d.%d: %s: engine %lld, workspace %lld bytes%s",
                     a->version / 10000, a->version / 100 % 100, a->version % 100, shape,
                     (long long)engine, (long long)e->workspace,
                     with_stats ? ", softmax statistics written" : "");
            return;
        }
        if (b.st != CUDNN_STATUS_SUCCESS)
            describe_failure(a, b.step, b.st, why[with_stats], NOTE_LEN);
        else
            snprintf(why[with_stats], NOTE_LEN, "%s",
                     a->note[0] ? a->note : "the heuristics offered no engine");
    }
    drop_plan(a, e);
    set_note(a->note,
             "cuDNN %d.%d.%d refused %s (kvcal's kernels run it): %s; with the "
             "statistics output: %s",
             a->version / 10000, a->version / 100 % 100, a->version % 100, shape, why[0],
             why[1]);
}

/* *out = the entry of the shape, planned on first use. The oldest entry
 * makes room; its plan may still run on some stream, so the device is
 * synchronized before the plan is destroyed. */
static kvcal_status find_plan(kvcal_attention_t *a, const att_shape *shape,
                              const plan_entry **out)
{
    for (int i = 0; i < MAX_PLANS; i++) {
        plan_entry *e = &a->plans[i];
        if (e->used && same_shape(&e->shape, shape)) {
            *out = e;
            return KVCAL_OK;
        }
    }
    plan_entry *e = &a->plans[a->next];
    if (e->n_descs)
        KVCAL_CUDA_TRY(cudaDeviceSynchronize());
    a->next = (a->next + 1) % MAX_PLANS;
    drop_plan(a, e);
    e->used = 1;
    e->shape = *shape;
    plan_shape(a, e);
    *out = e;
    return KVCAL_OK;
}

static size_t stats_offset(const plan_entry *e)
{
    return ((size_t)e->workspace + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

/* Runs e's plan (its statistics into lse, when the caller takes them); the
 * workspace grows first when e needs more. */
static kvcal_status execute(kvcal_attention_t *a, const plan_entry *e, kvcal_bf16 *out,
                            const kvcal_bf16 *q, const kvcal_bf16 *k, const kvcal_bf16 *v,
                            float scale, float *lse, cudaStream_t stream)
{
    const att_shape *sh = &e->shape;
    char shape[160];
    const size_t need =
        stats_offset(e) + (e->with_stats && !lse ? (size_t)sh->batch * sh->heads *
                                                       sh->seq_len * sizeof(float)
                                                 : 0);
    if (need > a->workspace_bytes) {
        KVCAL_CUDA_TRY(cudaFree(a->workspace)); // waits for the work that uses it
        a->workspace = NULL;
        a->workspace_bytes = 0;
        const cudaError_t err = cudaMalloc(&a->workspace, need);
        if (err != cudaSuccess) {
            a->workspace = NULL;
            cudaGetLastError(); // reported here, not by the next launch check
            shape_text(shape, sizeof shape, sh);
            return kvcal_fail(kvcal_cuda_status(err),
                              "attention (cuDNN %d, %s): cudaMalloc of its workspace, %zu "
                              "bytes: %s; use a smaller batch, or KVCAL_ATTENTION=kvcal for "
                              "kvcal's kernel, which needs none",
                              a->version, shape, need, cudaGetErrorString(err));
        }
        a->workspace_bytes = need;
    }
    a->scale = scale;
    a->neg_inf = a->version >= 91000 ? -INFINITY : -FLT_MAX;
    const int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_NEG_INF, UID_STATS};
    void *ptrs[7] = {(void *)q,   (void *)k,   (void *)v,
                     (void *)out, &a->scale,   &a->neg_inf,
                     lse ? (void *)lse : (char *)a->workspace + stats_offset(e)};
    const int64_t n = e->with_stats ? 7 : 6;
    cudnnBackendDescriptor_t pack = NULL;
    const char *step = "cudnnBackendCreateDescriptor (variant pack)";
    cudnnStatus_t st = a->api.CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (st == CUDNN_STATUS_SUCCESS) {
        step = "variant pack";
        st = a->api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                 n, uids);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, n, ptrs);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->api.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                     CUDNN_TYPE_VOID_PTR, 1, &a->workspace);
        if (st == CUDNN_STATUS_SUCCESS)
            st = a->api.Finalize(pack);
        if (st == CUDNN_STATUS_SUCCESS) {
            step = "cudnnSetStream";
            st = a->api.SetStream(a->handle, stream);
        }
        if (st == CUDNN_STATUS_SUCCESS) {
            step = "cudnnBackendExecute";
            st = a->api.Execute(a->handle, e->plan, pack);
        }
        a->api.DestroyDescriptor(pack);
    }
    if (st != CUDNN_STATUS_SUCCESS) {
        char why[NOTE_LEN];
        describe_failure(a, step, st, why, sizeof why);
        shape_text(shape, sizeof shape, sh);
        return kvcal_fail(KVCAL_ERR_CUDA,
                          "attention (cuDNN %d, %s): %s; KVCAL_ATTENTION=kvcal runs "
                          "kvcal's kernel instead",
                          a->version, shape, why);
    }
    return KVCAL_OK;
}

/* Runs the call on cuDNN when its shape has a plan (the statistics into
 * lse when shape->lse); *taken = 0 otherwise. */
static kvcal_status try_cudnn(kvcal_attention_t *a, kvcal_bf16 *out, const kvcal_bf16 *q,
                              const kvcal_bf16 *k, const kvcal_bf16 *v,
                              const att_shape *shape, float scale, float *lse,
                              cudaStream_t stream, int *taken)
{
    *taken = 0;
    const uintptr_t addr = (uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v |
                           (uintptr_t)lse;
    if (!a->version || addr % 16 || shape->q_stride % 8 || shape->k_stride % 8 ||
        shape->k_head % 8 || shape->v_stride % 8 || shape->v_head % 8 ||
        shape->out_stride % 8 || shape->head_dim % 8 || shape->v_dim % 8)
        return KVCAL_OK;
    const plan_entry *e = NULL;
    const kvcal_status st = find_plan(a, shape, &e);
    if (st != KVCAL_OK)
        return st;
    if (!e->ok)
        return KVCAL_OK;
    *taken = 1;
    return execute(a, e, out, q, k, v, scale, lse, stream);
}

static void release_cudnn(kvcal_attention_t *a)
{
    for (int i = 0; i < MAX_PLANS; i++)
        drop_plan(a, &a->plans[i]);
    cudaFree(a->workspace);
    a->workspace = NULL;
    unload(a);
}

#else // no cuDNN headers at build time

struct kvcal_attention {
    int version;
    char note[NOTE_LEN];
};

static void load(kvcal_attention_t *a)
{
    set_note(a->note, "built without cuDNN's headers: attention runs on kvcal's kernel");
}

static kvcal_status try_cudnn(kvcal_attention_t *, kvcal_bf16 *, const kvcal_bf16 *,
                              const kvcal_bf16 *, const kvcal_bf16 *, const att_shape *,
                              float, float *, cudaStream_t, int *taken)
{
    *taken = 0;
    return KVCAL_OK;
}

static void release_cudnn(kvcal_attention_t *)
{
}

#endif

// --- public --------------------------------------------------------------------

kvcal_status kvcal_attention_create(int own_kernel, kvcal_attention_t **out)
{
    *out = NULL;
    kvcal_attention_t *a = (kvcal_attention_t *)calloc(1, sizeof *a);
    if (!a)
        return kvcal_fail(KVCAL_ERR_NOMEM, "attention: out of host memory");
    if (own_kernel)
        set_note(a->note, "kvcal's kernel asked for: attention runs on it");
    else
        load(a);
    *out = a;
    return KVCAL_OK;
}

void kvcal_attention_destroy(kvcal_attention_t *a)
{
    if (!a)
        return;
    cudaDeviceSynchronize();
    release_cudnn(a);
    free(a);
}

int kvcal_attention_cudnn_version(const kvcal_attention_t *a)
{
    return a ? a->version : 0;
}

const char *kvcal_attention_note(const kvcal_attention_t *a)
{
    return a ? a->note : "";
}

kvcal_status kvcal_attention_run(kvcal_attention_t *a, kvcal_bf16 *out, int64_t out_stride,
                                 const kvcal_bf16 *q, const kvcal_bf16 *k,
                                 const kvcal_bf16 *v, int64_t qkv_stride, int batch,
                                 int seq_len, int n_heads, int n_kv_heads, int head_dim,
                                 float scale, cudaStream_t stream,
                                 kvcal_attention_impl *impl)
{
    if (!a)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG, "attention: NULL kvcal_attention_t");
    int taken = 0;
    // cuDNN only for arguments kvcal_attention_launch accepts: it rejects the rest
    if (out && q && k && v && scale > 0.0f && batch > 0 && seq_len > 0 && n_heads > 0 &&
        n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0 && head_dim <= 256 &&
        out_stride >= (int64_t)n_heads * head_dim && qkv_stride >= head_dim) {
        const att_shape shape = {batch,    seq_len,    n_heads,    n_kv_heads, head_dim,
                                 head_dim, qkv_stride, qkv_stride, head_dim,   qkv_stride,
                                 head_dim, out_stride, 0};
        kvcal_status st = try_cudnn(a, out, q, k, v, &shape, scale, NULL, stream, &taken);
        if (st != KVCAL_OK)
            return st;
    }
    if (impl)
        *impl = taken ? KVCAL_ATTENTION_IMPL_CUDNN : KVCAL_ATTENTION_IMPL_KVCAL;
    if (taken)
        return KVCAL_OK;
    return kvcal_attention_launch(out, out_stride, q, k, v, qkv_stride, batch, seq_len,
                                  n_heads, n_kv_heads, head_dim, scale, stream);
}

kvcal_status kvcal_attention_run_qk_v(kvcal_attention_t *a, kvcal_bf16 *out,
                                      int64_t out_stride, const kvcal_bf16 *q,
                                      int64_t q_stride, const kvcal_bf16 *k,
                                      int64_t k_stride, int64_t k_head_stride,
                                      const kvcal_bf16 *v, int64_t v_stride,
                                      int64_t v_head_stride, int batch, int seq_len,
                                      int n_heads, int n_kv_heads, int qk_dim, int v_dim,
                                      float scale, cudaStream_t stream, int *taken)
{
    *taken = 0;
    if (!a || !out || !q || !k || !v || !(scale > 0.0f) || isinf(scale) || batch < 1 ||
        seq_len < 1 || n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads ||
        qk_dim < 1 || qk_dim > 256 || v_dim < 1 || v_dim > qk_dim ||
        q_stride < (int64_t)n_heads * qk_dim || k_head_stride < qk_dim ||
        k_stride < (int64_t)(n_kv_heads - 1) * k_head_stride + qk_dim ||
        v_head_stride < v_dim ||
        v_stride < (int64_t)(n_kv_heads - 1) * v_head_stride + v_dim ||
        out_stride < (int64_t)n_heads * v_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "attention (q/k head_dim %d, v head_dim %d): %d x %d tokens, "
                          "%d/%d heads, scale %g, strides q %lld, k %lld (heads %lld "
                          "apart), v %lld (heads %lld apart), out %lld: need buffers, "
                          "n_heads a multiple of n_kv_heads, 1 <= v head_dim <= q/k "
                          "head_dim <= 256, a finite scale > 0 and rows that hold their "
                          "heads",
                          qk_dim, v_dim, batch, seq_len, n_heads, n_kv_heads,
                          (double)scale, (long long)q_stride, (long long)k_stride,
                          (long long)k_head_stride, (long long)v_stride,
                          (long long)v_head_stride, (long long)out_stride);
    const att_shape shape = {batch,         seq_len,    n_heads,  n_kv_heads,    qk_dim,
                             v_dim,         q_stride,   k_stride, k_head_stride, v_stride,
                             v_head_stride, out_stride, 0};
    return try_cudnn(a, out, q, k, v, &shape, scale, NULL, stream, taken);
}

kvcal_status kvcal_attention_run_sinks(kvcal_attention_t *a, kvcal_bf16 *out,
                                       int64_t out_stride, const kvcal_bf16 *q,
                                       const kvcal_bf16 *k, const kvcal_bf16 *v,
                                       int64_t qkv_stride, int batch, int seq_len,
                                       int n_heads, int n_kv_heads, int head_dim,
                                       float scale, const kvcal_bf16 *sinks, float *lse,
                                       cudaStream_t stream, int *taken)
{
    *taken = 0;
    if (!a || !out || !q || !k || !v || !sinks || !lse || !(scale > 0.0f) ||
        isinf(scale) || batch < 1 || seq_len < 1 || n_heads < 1 || n_kv_heads < 1 ||
        n_heads % n_kv_heads || head_dim < 1 || head_dim > 256 ||
        qkv_stride < head_dim || out_stride < (int64_t)n_heads * head_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "attention with sinks (head_dim %d): %d x %d tokens, %d/%d heads, "
                          "scale %g, strides qkv %lld, out %lld: need buffers (sinks and "
                          "lse too), n_heads a multiple of n_kv_heads, 1 <= head_dim <= "
                          "256, a finite scale > 0 and rows that hold their heads",
                          head_dim, batch, seq_len, n_heads, n_kv_heads, (double)scale,
                          (long long)qkv_stride, (long long)out_stride);
    const att_shape shape = {batch,    seq_len,    n_heads,    n_kv_heads, head_dim,
                             head_dim, qkv_stride, qkv_stride, head_dim,   qkv_stride,
                             head_dim, out_stride, 1};
    kvcal_status st = try_cudnn(a, out, q, k, v, &shape, scale, lse, stream, taken);
    if (st == KVCAL_OK && *taken)
        st = kvcal_attention_sinks_rescale_launch(out, out_stride, lse, sinks, batch,
                                                  seq_len, n_heads, head_dim, stream);
    return st;
}
