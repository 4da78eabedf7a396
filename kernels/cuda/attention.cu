/* kernels/cuda/attention.cu: causal prefill attention on the tensor cores,
 * flash-attention style (one pass over K/V with an online softmax).
 *
 * A block of WARPS warps owns BM = WARPS * 16 * MT queries of one (sequence,
 * query head); each warp owns MT row tiles of 16 and keeps their fp32 output
 * accumulators in registers (and, when MT is 1, their Q fragments; with MT 2
 * they are re-read from shared memory, trading shared-memory reads for
 * registers). K and V stream through shared memory in tiles of 64 keys with
 * cp.async, the V tile loading while S = Q K^T is computed and the next K
 * tile while P V is: mma.sync m16n8k16 bf16 -> fp32 for both products, the
 * probabilities P reused from the S accumulators as A fragments without a
 * trip through shared memory; a warp skips key tiles entirely above its rows.
 * Blocks are launched diagonal-heaviest first so the causal triangle's long
 * rows do not finish last. The versions (WARPS, MT) are timed against each
 * other in bench/runner_ops; kvcal_attention_launch uses the fastest.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, lane = 4 * g + t):
 *   A (16x16, row): a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
 *   B (16x8, col):  b0 (k 2t..2t+1, n g) b1 (k 2t+8.., n g)
 *   C (16x8):       c0 c1 (g, 2t..2t+1)  c2 c3 (g+8, 2t..2t+1) */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ops.h"

enum { ATT_BN = 64, ATT_PAD = 8 };

// --- PTX wrappers ---------------------------------------------------------------


static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c (16x8 fp32) += a (16x16 bf16) b (16x8 bf16) */
static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4],
                                                uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x; ex2.approx (2 ulp) is what flash-attention kernels use, +0 for -inf. */
static __device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}

// --- tiles --------------------------------------------------------------------

/* Queues rows [r0, r0 + ROWS) of a (seq_len, stride) matrix slice of head_dim
 * HD columns into a (ROWS, HD + PAD) shared tile; rows past seq_len become
 * zeros. */
template <int HD, int ROWS, int THREADS>
static __device__ __forceinline__ void load_tile(__nv_bfloat16 *tile,
                                                 const __nv_bfloat16 *src, int64_t stride,
                                                 int r0, int seq_len)
{
    constexpr int CHUNKS = HD / 8;
    for (int c = threadIdx.x; c < ROWS * CHUNKS; c += THREADS) {
        const int r = c / CHUNKS, col = (c - r * CHUNKS) * 8;
        const bool valid = r0 + r < seq_len;
        const __nv_bfloat16 *s = src + (int64_t)(valid ? r0 + r : 0) * stride + col;
        cp_async16(tile + r * (HD + ATT_PAD) + col, s, valid);
    }
}

// --- kernel -------------------------------------------------------------------

/* BAND: within a sliding window (window > 0: query t reads keys t - window +
 * 1 .. t; key tiles below every row's window are skipped), with soft-capped
 * scores (softcap > 0) and with a sink logit per query head (sinks non-NULL:
 * the running max and sum start at the sink, whose value row is zero), as
 * kvcal_attention_sinks_ref; a row whose keys in a tile are all masked keeps
 * its running max and sum. Without BAND the kernel is the plain causal one
 * (window, softcap and sinks unread). */
template <int HD, int WARPS, int MT, int MINB, bool BAND>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    attention_kernel(__nv_bfloat16 *__restrict__ out, // (batch * seq_len, out_stride)
                     int64_t out_stride,
                     const __nv_bfloat16 *__restrict__ q, // (batch * seq_len, stride)
                     const __nv_bfloat16 *__restrict__ k,
                     const __nv_bfloat16 *__restrict__ v, int64_t stride, int seq_len,
                     int group, float scale_log2, int window, float softcap,
                     const __nv_bfloat16 *__restrict__ sinks) // (heads) or NULL
{
    constexpr int LD = HD + ATT_PAD, KSTEPS = HD / 16, DTILES = HD / 8;
    // Q fragments stay in registers unless registers are short (MT 2, MINB 4
    // blocks per SM asked for, or head_dim 256), when they are re-read from
    // shared memory
    constexpr bool Q_IN_REGS = MT == 1 && MINB < 4 && HD <= 128;
    constexpr int BM = WARPS * 16 * MT, THREADS = WARPS * 32,
                  QREG = Q_IN_REGS ? KSTEPS : 1;
    extern __shared__ __align__(16) unsigned char att_smem[];
    __nv_bfloat16 *sq = reinterpret_cast<__nv_bfloat16 *>(att_smem); // (BM, LD)
    __nv_bfloat16 *sk = sq + BM * LD;                                // (64, LD)
    __nv_bfloat16 *sv = sk + ATT_BN * LD;                            // (64, LD)

    const int h = blockIdx.x, b = blockIdx.y;
    const int m_block = gridDim.z - 1 - blockIdx.z;
    const int m0 = m_block * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gid = lane >> 2, tig = lane & 3;
    const int warp_row0 = warp * 16 * MT; // first of this warp's rows in the block
    const int64_t seq0 = (int64_t)b * seq_len;
    const __nv_bfloat16 *qb = q + seq0 * stride + (int64_t)h * HD;
    const __nv_bfloat16 *kb = k + seq0 * stride + (int64_t)(h / group) * HD;
    const __nv_bfloat16 *vb = v + seq0 * stride + (int64_t)(h / group) * HD;

    const bool windowed = BAND && window > 0;
    /* the first key tile the block's first row reads */
    const int j0 = windowed && m0 - window + 1 > 0 ? (m0 - window + 1) / ATT_BN : 0;
    load_tile<HD, BM, THREADS>(sq, qb, stride, m0, seq_len);
    cp_async_commit();
    load_tile<HD, ATT_BN, THREADS>(sk, kb, stride, j0 * ATT_BN, seq_len);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    uint32_t qf[QREG][4];
    if (Q_IN_REGS) {
#pragma unroll
        for (int kk = 0; kk < QREG; kk++)
            ldmatrix_x4(qf[kk],
                        sq + (warp_row0 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
    }

    float o[MT][DTILES][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int d = 0; d < DTILES; d++)
            o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
    /* the sink (base 2): a first score of the row, its exp 1 counted once in
     * the quad's sum (by the thread of tig 0) */
    const bool sunk = BAND && sinks;
    const float sink =
        sunk ? __bfloat162float(sinks[h]) * 1.4426950408889634f : -INFINITY;
    float row_max[MT][2], row_sum[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        row_max[mt][0] = row_max[mt][1] = sink,
        row_sum[mt][0] = row_sum[mt][1] = sunk && tig == 0 ? 1.0f : 0.0f;

    const int last_key = min(m0 + BM, seq_len) - 1;
    const int n_blocks = last_key / ATT_BN + 1;
    for (int j = j0; j < n_blocks; j++) {
        const int n0 = j * ATT_BN;
        cp_async_wait<0>();
        __syncthreads(); // K_j landed; every warp is done with V_{j-1}
        load_tile<HD, ATT_BN, THREADS>(sv, vb, stride, n0, seq_len);
        cp_async_commit();

        // tiles entirely above the diagonal for all of this warp's rows add nothing
        const int wr0 = m0 + warp_row0, wr1 = wr0 + 16 * MT - 1; /* the warp's rows */
        bool active = n0 <= wr1;
        bool masked = n0 + ATT_BN - 1 > wr0;
        if (windowed) { /* and tiles below the window of all of them */
            active = active && n0 + ATT_BN - 1 >= wr0 - window + 1;
            masked = masked || n0 < wr1 - window + 1;
        }
        float s[MT][ATT_BN / 8][4];
        if (active) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < ATT_BN / 8; nt++)
                    s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk++) {
                uint32_t qm[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    if (Q_IN_REGS) {
#pragma unroll
                        for (int r = 0; r < 4; r++)
                            qm[mt][r] = qf[Q_IN_REGS ? kk : 0][r];
                    } else {
                        ldmatrix_x4(qm[mt], sq +
                                                (warp_row0 + mt * 16 + (lane & 15)) * LD +
                                                kk * 16 + (lane >> 4) * 8);
                    }
                }
#pragma unroll
                for (int np = 0; np < ATT_BN / 16; np++) {
                    uint32_t kf[4];
                    ldmatrix_x4(kf, sk +
                                        (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD +
                                        kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(s[mt][2 * np], qm[mt], kf[0], kf[1]);
                        mma_bf16(s[mt][2 * np + 1], qm[mt], kf[2], kf[3]);
                    }
                }
            }

            // --- online softmax (base 2) ---
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int q_row0 = m0 + warp_row0 + mt * 16 + gid; // and q_row0 + 8
                float bmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < ATT_BN / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][nt][e] * scale_log2;
                        if (BAND && softcap > 0.0f) /* cap * tanh(s / cap), natural log */
                            x = softcap * tanhf(x * 0.6931471805599453f / softcap) *
                                1.4426950408889634f;
                        const int key = n0 + nt * 8 + 2 * tig + (e & 1),
                                  qrow = q_row0 + (e >> 1) * 8;
                        if (masked && (key > qrow || (windowed && key + window <= qrow)))
                            x = -INFINITY;
                        s[mt][nt][e] = x;
                        bmax[e >> 1] = fmaxf(bmax[e >> 1], x);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    bmax[r] = fmaxf(bmax[r], __shfl_xor_sync(0xffffffffu, bmax[r], 1));
                    bmax[r] = fmaxf(bmax[r], __shfl_xor_sync(0xffffffffu, bmax[r], 2));
                    const float m_new = fmaxf(row_max[mt][r], bmax[r]);
                    /* no key yet (a window's tile all masked for this row): 0, not NaN */
                    const float corr = fast_exp2(
                        row_max[mt][r] - (BAND && m_new == -INFINITY ? 0.0f : m_new));
                    row_max[mt][r] = m_new;
                    row_sum[mt][r] *= corr;
#pragma unroll
                    for (int d = 0; d < DTILES; d++) {
                        o[mt][d][2 * r] *= corr;
                        o[mt][d][2 * r + 1] *= corr;
                    }
                }
#pragma unroll
                for (int nt = 0; nt < ATT_BN / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float mr = row_max[mt][e >> 1];
                        const float p =
                            fast_exp2(s[mt][nt][e] - (BAND && mr == -INFINITY ? 0.0f : mr));
                        s[mt][nt][e] = p;
                        row_sum[mt][e >> 1] += p;
                    }
                }
            }
        }

        cp_async_wait<0>();
        __syncthreads(); // V_j landed; every warp is done with K_j
        if (j + 1 < n_blocks) {
            load_tile<HD, ATT_BN, THREADS>(sk, kb, stride, n0 + ATT_BN, seq_len);
            cp_async_commit();
        }

        // --- O += P V ---
        if (active) {
#pragma unroll
            for (int kk = 0; kk < ATT_BN / 16; kk++) {
                uint32_t pf[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    pf[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pf[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pf[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pf[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < HD / 16; dp++) {
                    uint32_t vf[4];
                    ldmatrix_x4_trans(
                        vf, sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD +
                                dp * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        mma_bf16(o[mt][2 * dp], pf[mt], vf[0], vf[1]);
                        mma_bf16(o[mt][2 * dp + 1], pf[mt], vf[2], vf[3]);
                    }
                }
            }
        }
    }

    // --- normalize, stage through this warp's rows of sq, store 16-byte chunks ---
    __nv_bfloat16 *stage = sq + warp_row0 * LD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            row_sum[mt][r] += __shfl_xor_sync(0xffffffffu, row_sum[mt][r], 1);
            row_sum[mt][r] += __shfl_xor_sync(0xffffffffu, row_sum[mt][r], 2);
        }
        const float inv0 = 1.0f / row_sum[mt][0], inv1 = 1.0f / row_sum[mt][1];
        __nv_bfloat16 *st = stage + mt * 16 * LD;
#pragma unroll
        for (int d = 0; d < DTILES; d++) {
            *reinterpret_cast<__nv_bfloat162 *>(st + gid * LD + d * 8 + 2 * tig) =
                __floats2bfloat162_rn(o[mt][d][0] * inv0, o[mt][d][1] * inv0);
            *reinterpret_cast<__nv_bfloat162 *>(st + (gid + 8) * LD + d * 8 + 2 * tig) =
                __floats2bfloat162_rn(o[mt][d][2] * inv1, o[mt][d][3] * inv1);
        }
    }
    __syncwarp();
    constexpr int CHUNKS = HD / 8;
    for (int c = lane; c < 16 * MT * CHUNKS; c += 32) {
        const int r = c / CHUNKS, col = (c - r * CHUNKS) * 8;
        const int row = m0 + warp_row0 + r;
        if (row < seq_len)
            *reinterpret_cast<uint4 *>(out + (seq0 + row) * out_stride + (int64_t)h * HD +
                                       col) =
                *reinterpret_cast<const uint4 *>(stage + r * LD + col);
    }
}

// --- portable path --------------------------------------------------------------

enum { SIMT_MAX_HEAD_DIM = 256, SIMT_WARPS = 4 };

/* One warp per query row, lane l owning channels l, l + 32, ...: a dot product
 * reduced across the warp per key, online softmax in fp32. For the head sizes
 * the tensor-core kernel lacks (tiny test models, head_dim 8 .. 256); correct
 * everywhere, fast nowhere. */
__global__ void __launch_bounds__(SIMT_WARPS * 32)
    attention_simt_kernel(__nv_bfloat16 *__restrict__ out, int64_t out_stride,
                          const __nv_bfloat16 *__restrict__ q,
                          const __nv_bfloat16 *__restrict__ k,
                          const __nv_bfloat16 *__restrict__ v, int64_t stride,
                          int seq_len, int group, int head_dim, float scale_log2,
                          int window, float softcap,
                          const __nv_bfloat16 *__restrict__ sinks) // (heads) or NULL
{
    constexpr int CH = SIMT_MAX_HEAD_DIM / 32;
    const int h = blockIdx.x, b = blockIdx.y, lane = threadIdx.x & 31;
    const int row = blockIdx.z * SIMT_WARPS + (threadIdx.x >> 5);
    if (row >= seq_len)
        return;
    const int64_t seq0 = (int64_t)b * seq_len;
    const __nv_bfloat16 *qr = q + (seq0 + row) * stride + (int64_t)h * head_dim;
    const __nv_bfloat16 *kb = k + seq0 * stride + (int64_t)(h / group) * head_dim;
    const __nv_bfloat16 *vb = v + seq0 * stride + (int64_t)(h / group) * head_dim;
    float qv[CH], acc[CH];
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int c = lane + 32 * i;
        qv[i] = c < head_dim ? __bfloat162float(qr[c]) * scale_log2 : 0.0f;
        acc[i] = 0.0f;
    }
    float m = sinks ? __bfloat162float(sinks[h]) * 1.4426950408889634f : -INFINITY;
    float l = sinks ? 1.0f : 0.0f;
    for (int key = window > 0 && row >= window ? row - window + 1 : 0; key <= row; key++) {
        const __nv_bfloat16 *kr = kb + (int64_t)key * stride,
                            *vr = vb + (int64_t)key * stride;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int c = lane + 32 * i;
            if (c < head_dim)
                dot += qv[i] * __bfloat162float(kr[c]);
        }
        for (int o = 16; o > 0; o >>= 1)
            dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (softcap > 0.0f) { /* on the natural-log scale: cap * tanh(s / cap) */
            const float s_nat = dot * 0.6931471805599453f;
            dot = softcap * tanhf(s_nat / softcap) * 1.4426950408889634f;
        }
        const float m_new = fmaxf(m, dot);
        const float corr = fast_exp2(m - m_new), p = fast_exp2(dot - m_new);
        m = m_new;
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < CH; i++) {
            const int c = lane + 32 * i;
            acc[i] = acc[i] * corr + (c < head_dim ? p * __bfloat162float(vr[c]) : 0.0f);
        }
    }
    __nv_bfloat16 *orow = out + (seq0 + row) * out_stride + (int64_t)h * head_dim;
#pragma unroll
    for (int i = 0; i < CH; i++) {
        const int c = lane + 32 * i;
        if (c < head_dim)
            orow[c] = __float2bfloat16_rn(acc[i] / l);
    }
}

static kvcal_status attention_simt_run(__nv_bfloat16 *out, int64_t out_stride,
                                       const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                       const __nv_bfloat16 *v, int64_t stride, int batch,
                                       int seq_len, int n_heads, int group, int head_dim,
                                       float scale, int window, float softcap,
                                       const __nv_bfloat16 *sinks, cudaStream_t stream)
{
    const int z = (seq_len + SIMT_WARPS - 1) / SIMT_WARPS;
    if (z > 65535 || batch > 65535)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention: batch %d x seq_len %d exceeds the launch grid",
                          batch, seq_len);
    const dim3 grid(n_heads, batch, z);
    attention_simt_kernel<<<grid, SIMT_WARPS * 32, 0, stream>>>(
        out, out_stride, q, k, v, stride, seq_len, group, head_dim,
        scale * 1.4426950408889634f, window, softcap, sinks);
    KVCAL_CUDA_CHECK_LAUNCH("attention_simt_kernel");
    return KVCAL_OK;
}

// --- launcher -----------------------------------------------------------------

template <int HD, int WARPS, int MT, int MINB, bool BAND = false>
static kvcal_status
attention_run(__nv_bfloat16 *out, int64_t out_stride, const __nv_bfloat16 *q,
              const __nv_bfloat16 *k, const __nv_bfloat16 *v, int64_t stride, int batch,
              int seq_len, int n_heads, int group, float scale, cudaStream_t stream,
              int window = 0, float softcap = 0.0f, const __nv_bfloat16 *sinks = nullptr)
{
    constexpr int BM = WARPS * 16 * MT;
    const size_t smem =
        (size_t)(BM + 2 * ATT_BN) * (HD + ATT_PAD) * sizeof(__nv_bfloat16);
    const int m_blocks = (seq_len + BM - 1) / BM;
    if (m_blocks > 65535 || batch > 65535)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "attention: batch %d x seq_len %d exceeds the launch grid",
                          batch, seq_len);
    KVCAL_CUDA_TRY(cudaFuncSetAttribute(attention_kernel<HD, WARPS, MT, MINB, BAND>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
    const dim3 grid(n_heads, batch, m_blocks);
    attention_kernel<HD, WARPS, MT, MINB, BAND><<<grid, WARPS * 32, smem, stream>>>(
        out, out_stride, q, k, v, stride, seq_len, group, scale * 1.4426950408889634f,
        window, softcap, sinks);
    KVCAL_CUDA_CHECK_LAUNCH("attention_kernel");
    return KVCAL_OK;
}

template <int HD>
static kvcal_status attention_version(int version, __nv_bfloat16 *out, int64_t out_stride,
                                      const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                      const __nv_bfloat16 *v, int64_t stride, int batch,
                                      int seq_len, int n_heads, int group, float scale,
                                      cudaStream_t stream)
{
    switch (version) {
    case 1:
        return attention_run<HD, 4, 1, 1>(out, out_stride, q, k, v, stride, batch,
                                          seq_len, n_heads, group, scale, stream);
    case 2:
        return attention_run<HD, 4, 2, 1>(out, out_stride, q, k, v, stride, batch,
                                          seq_len, n_heads, group, scale, stream);
    case 3:
        return attention_run<HD, 8, 1, 1>(out, out_stride, q, k, v, stride, batch,
                                          seq_len, n_heads, group, scale, stream);
    default:
        return attention_run<HD, 4, 1, 4>(out, out_stride, q, k, v, stride, batch,
                                          seq_len, n_heads, group, scale, stream);
    }
}

static int misaligned(const void *p)
{
    return ((uintptr_t)p & 15u) != 0;
}

extern "C" kvcal_status kvcal_attention_launch_version(
    int version, kvcal_bf16 *out, int64_t out_stride, const kvcal_bf16 *q,
    const kvcal_bf16 *k, const kvcal_bf16 *v, int64_t qkv_stride, int batch, int seq_len,
    int n_heads, int n_kv_heads, int head_dim, float scale, cudaStream_t stream)
{
    if (!out || !q || !k || !v || batch < 0 || seq_len < 0 || n_heads <= 0 ||
        n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || !(scale > 0.0f) ||
        out_stride < (int64_t)n_heads * head_dim || qkv_stride < (int64_t)head_dim ||
        version < 1 || version > KVCAL_ATTENTION_VERSIONS)
        return kvcal_fail(
            KVCAL_ERR_INVALID_ARG,
            "attention: batch %d, seq_len %d, %d heads, %d kv heads, scale %g, "
            "version %d: need buffers, n_heads a multiple of n_kv_heads, "
            "scale > 0, strides that hold a row and a version in 1..%d",
            batch, seq_len, n_heads, n_kv_heads, (double)scale, version,
            KVCAL_ATTENTION_VERSIONS);
    if (head_dim <= 0 || head_dim > SIMT_MAX_HEAD_DIM)
        return kvcal_fail(
            KVCAL_ERR_UNSUPPORTED,
            "attention: head_dim %d: the CUDA backend supports head_dim up to "
            "%d (tensor cores for 64, 80, 96, 128 and 192)",
            head_dim, SIMT_MAX_HEAD_DIM);
    if (batch == 0 || seq_len == 0)
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *qq = reinterpret_cast<const __nv_bfloat16 *>(q);
    auto *kk = reinterpret_cast<const __nv_bfloat16 *>(k);
    auto *vv = reinterpret_cast<const __nv_bfloat16 *>(v);
    const int group = n_heads / n_kv_heads;
    const int tensor_core = (head_dim == 64 || head_dim == 80 || head_dim == 96 ||
                             head_dim == 128 || head_dim == 192) &&
                            !misaligned(out) && !misaligned(q) && !misaligned(k) &&
                            !misaligned(v) && qkv_stride % 8 == 0 && out_stride % 8 == 0;
    if (!tensor_core)
        return attention_simt_run(o, out_stride, qq, kk, vv, qkv_stride, batch, seq_len,
                                  n_heads, group, head_dim, scale, 0, 0.0f, nullptr,
                                  stream);
    switch (head_dim) {
    case 192: /* one shape, Q from shared memory (the window kernel's at 256) */
        return attention_run<192, 4, 1, 1>(o, out_stride, qq, kk, vv, qkv_stride, batch,
                                           seq_len, n_heads, group, scale, stream);
    case 64:
        return attention_version<64>(version, o, out_stride, qq, kk, vv, qkv_stride,
                                     batch, seq_len, n_heads, group, scale, stream);
    case 80:
        return attention_version<80>(version, o, out_stride, qq, kk, vv, qkv_stride,
                                     batch, seq_len, n_heads, group, scale, stream);
    case 96:
        return attention_version<96>(version, o, out_stride, qq, kk, vv, qkv_stride,
                                     batch, seq_len, n_heads, group, scale, stream);
    default:
        return attention_version<128>(version, o, out_stride, qq, kk, vv, qkv_stride,
                                      batch, seq_len, n_heads, group, scale, stream);
    }
}

extern "C" kvcal_status kvcal_attention_launch(kvcal_bf16 *out, int64_t out_stride,
                                               const kvcal_bf16 *q, const kvcal_bf16 *k,
                                               const kvcal_bf16 *v, int64_t qkv_stride,
                                               int batch, int seq_len, int n_heads,
                                               int n_kv_heads, int head_dim, float scale,
                                               cudaStream_t stream)
{
    return kvcal_attention_launch_version(KVCAL_ATTENTION_DEFAULT_VERSION, out,
                                          out_stride, q, k, v, qkv_stride, batch, seq_len,
                                          n_heads, n_kv_heads, head_dim, scale, stream);
}

extern "C" kvcal_status
kvcal_attention_sinks_launch(kvcal_bf16 *out, int64_t out_stride, const kvcal_bf16 *q,
                             const kvcal_bf16 *k, const kvcal_bf16 *v, int64_t qkv_stride,
                             int batch, int seq_len, int n_heads, int n_kv_heads,
                             int head_dim, float scale, int window, float softcap,
                             const kvcal_bf16 *sinks, cudaStream_t stream)
{
    if (!out || !q || !k || !v || batch < 0 || seq_len < 0 || n_heads <= 0 ||
        n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || !(scale > 0.0f) || window < 0 ||
        !(softcap >= 0.0f) || out_stride < (int64_t)n_heads * head_dim ||
        qkv_stride < (int64_t)head_dim)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "windowed attention: batch %d, seq_len %d, %d heads, %d kv "
                          "heads, scale %g, window %d, soft cap %g: need buffers, n_heads "
                          "a multiple of n_kv_heads, scale > 0, a window and a cap >= 0 "
                          "and strides that hold a row",
                          batch, seq_len, n_heads, n_kv_heads, (double)scale, window,
                          (double)softcap);
    if (head_dim <= 0 || head_dim > SIMT_MAX_HEAD_DIM)
        return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                          "windowed attention: head_dim %d: up to %d supported", head_dim,
                          SIMT_MAX_HEAD_DIM);
    if (batch == 0 || seq_len == 0)
        return KVCAL_OK;
    auto *o = reinterpret_cast<__nv_bfloat16 *>(out);
    auto *qq = reinterpret_cast<const __nv_bfloat16 *>(q);
    auto *kk = reinterpret_cast<const __nv_bfloat16 *>(k);
    auto *vv = reinterpret_cast<const __nv_bfloat16 *>(v);
    auto *sk = reinterpret_cast<const __nv_bfloat16 *>(sinks);
    const int group = n_heads / n_kv_heads;
    const int tensor_core =
        (head_dim == 64 || head_dim == 80 || head_dim == 96 || head_dim == 128 ||
         head_dim == 256) &&
        !misaligned(out) && !misaligned(q) && !misaligned(k) && !misaligned(v) &&
        qkv_stride % 8 == 0 && out_stride % 8 == 0;
    /* version 1's shape (4 warps x 16 rows; MINB 4 spills with the band), Q
     * from shared memory at 256 (246 registers, no spill on sm_90a) */
    switch (tensor_core ? head_dim : 0) {
    case 64:
        return attention_run<64, 4, 1, 1, true>(o, out_stride, qq, kk, vv, qkv_stride,
                                                batch, seq_len, n_heads, group, scale,
                                                stream, window, softcap, sk);
    case 80:
        return attention_run<80, 4, 1, 1, true>(o, out_stride, qq, kk, vv, qkv_stride,
                                                batch, seq_len, n_heads, group, scale,
                                                stream, window, softcap, sk);
    case 96:
        return attention_run<96, 4, 1, 1, true>(o, out_stride, qq, kk, vv, qkv_stride,
                                                batch, seq_len, n_heads, group, scale,
                                                stream, window, softcap, sk);
    case 128:
        return attention_run<128, 4, 1, 1, true>(o, out_stride, qq, kk, vv, qkv_stride,
                                                 batch, seq_len, n_heads, group, scale,
                                                 stream, window, softcap, sk);
    case 256:
        return attention_run<256, 4, 1, 1, true>(o, out_stride, qq, kk, vv, qkv_stride,
                                                 batch, seq_len, n_heads, group, scale,
                                                 stream, window, softcap, sk);
    default:
        return attention_simt_run(o, out_stride, qq, kk, vv, qkv_stride, batch, seq_len,
                                  n_heads, group, head_dim, scale, window, softcap, sk,
                                  stream);
    }
}

extern "C" kvcal_status
kvcal_attention_window_launch(kvcal_bf16 *out, int64_t out_stride, const kvcal_bf16 *q,
                              const kvcal_bf16 *k, const kvcal_bf16 *v,
                              int64_t qkv_stride, int batch, int seq_len, int n_heads,
                              int n_kv_heads, int head_dim, float scale, int window,
                              float softcap, cudaStream_t stream)
{
    return kvcal_attention_sinks_launch(out, out_stride, q, k, v, qkv_stride, batch,
                                        seq_len, n_heads, n_kv_heads, head_dim, scale,
                                        window, softcap, NULL, stream);
}

/* One thread per (row, head, 8 values): the values times the share the
 * head's sink leaves the keys, 1 / (1 + exp(sink - lse)). */
__global__ void sinks_rescale_kernel(__nv_bfloat16 *__restrict__ out, int64_t out_stride,
                                     const float *__restrict__ lse,
                                     const __nv_bfloat16 *__restrict__ sinks, int seq_len,
                                     int n_heads, int head_dim, int64_t chunks)
{
    const int per_row = n_heads * (head_dim / 8);
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < chunks;
         c += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = c / per_row; /* b * seq_len + t */
        const int h = (int)(c % per_row) / (head_dim / 8);
        const int64_t b = row / seq_len, t = row % seq_len;
        const float l = lse[(b * n_heads + h) * seq_len + t];
        const float f = 1.0f / (1.0f + __expf(__bfloat162float(sinks[h]) - l));
        uint4 *p = reinterpret_cast<uint4 *>(out + row * out_stride +
                                             (int64_t)(c % per_row) * 8);
        uint4 u = *p;
        __nv_bfloat162 *x = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 v = __bfloat1622float2(x[i]);
            x[i] = __floats2bfloat162_rn(v.x * f, v.y * f);
        }
        *p = u;
    }
}

extern "C" kvcal_status kvcal_attention_sinks_rescale_launch(
    kvcal_bf16 *out, int64_t out_stride, const float *lse, const kvcal_bf16 *sinks,
    int batch, int seq_len, int n_heads, int head_dim, cudaStream_t stream)
{
    if (!out || !lse || !sinks || batch < 0 || seq_len < 0 || n_heads < 1 ||
        head_dim < 8 || head_dim % 8 || out_stride < (int64_t)n_heads * head_dim ||
        out_stride % 8 || (uintptr_t)out % 16)
        return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                          "attention sinks' rescale: %d x %d rows, %d heads of %d, out "
                          "stride %lld: need buffers, head_dim a multiple of 8, a 16-byte "
                          "aligned out and a stride a multiple of 8 that holds a row",
                          batch, seq_len, n_heads, head_dim, (long long)out_stride);
    const int64_t chunks = (int64_t)batch * seq_len * n_heads * (head_dim / 8);
    if (chunks == 0)
        return KVCAL_OK;
    const int threads = 256;
    const int64_t blocks = (chunks + threads - 1) / threads;
    sinks_rescale_kernel<<<(unsigned)(blocks < 65536 * 16 ? blocks : 65536 * 16), threads, 0,
                           stream>>>(reinterpret_cast<__nv_bfloat16 *>(out), out_stride, lse,
                                     reinterpret_cast<const __nv_bfloat16 *>(sinks),
                                     seq_len, n_heads, head_dim, chunks);
    KVCAL_CUDA_CHECK_LAUNCH("sinks_rescale_kernel");
    return KVCAL_OK;
}
