/* kernels/cuda/kvquant_fmt_nvfp4.h: NVFP4's dequantization into 16-bit
 * values (bf16, f16) by byte tables, the fast dequantization's way
 * (kernels/cuda/kvquant_fmt.cu, v4 in bench/NOTES.md). C for the device and
 * the host alike, so that the CPU tests run these very functions against
 * the reference on every code (tests/test_kvquant_fmt.c).
 *
 * A block of 16 values has 8 magnitudes: the reference's products e2m1(m)
 * x d (m < 8, d = the block's decode scale), each rounded once to fp32 and
 * then to the 16-bit type. Wherever no product is NaN (d finite), code
 * m | 8 is the same value with its sign bit flipped (fp32 products and the
 * roundings to bf16 / f16 are symmetric). The 8 values' low bytes and high
 * bytes make two 8-byte tables that prmt.b32 indexes by the codes' magnitude
 * bits, 4 codes an instruction; the signs are flipped in the high bytes. */
#ifndef KVCAL_KERNELS_CUDA_KVQUANT_FMT_NVFP4_H
#define KVCAL_KERNELS_CUDA_KVQUANT_FMT_NVFP4_H

#include <stdint.h>

#include "core/scale_rule.h"

/* prmt.b32 in its default mode for selectors without bit 3: byte j of the
 * result is byte (s >> 4j) & 7 of the 8 bytes a (bytes 0-3), b (4-7). */
static inline KVCAL_HOST_DEVICE uint32_t kvcal_nvfp4_perm(uint32_t a, uint32_t b,
                                                          uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, s);
#else
    const uint64_t x = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int j = 0; j < 4; j++)
        r |= (uint32_t)(x >> (8 * (s >> (4 * j) & 7u)) & 0xffu) << (8 * j);
    return r;
#endif
}

/* The tables t of a block from p[0..3], its 8 magnitudes' 16-bit values two
 * a word (m = 2i in the low half of p[i], 2i + 1 in the high): t[0], t[1]
 * the low bytes of m = 0-3 and 4-7, t[2], t[3] their high bytes. */
static inline KVCAL_HOST_DEVICE void kvcal_nvfp4_tables(const uint32_t *p, uint32_t *t)
{
    t[0] = kvcal_nvfp4_perm(p[0], p[1], 0x6420u);
    t[1] = kvcal_nvfp4_perm(p[2], p[3], 0x6420u);
    t[2] = kvcal_nvfp4_perm(p[0], p[1], 0x7531u);
    t[3] = kvcal_nvfp4_perm(p[2], p[3], 0x7531u);
}

/* The 16-bit values of 8 codes w (value j at bits 4j..4j+3) of a block of
 * tables t, two a word (value 2i in the low half of o[i]). w << 4 holds
 * the even values' signs at bit 7 of each byte, w the odd ones': one prmt
 * puts 4 of them at bit 7 of the bytes of their high-byte word. */
static inline KVCAL_HOST_DEVICE void kvcal_nvfp4_lookup8(const uint32_t *t, uint32_t w,
                                                         uint32_t *o)
{
    const uint32_t m = w & 0x77777777u, w4 = w << 4;
    const uint32_t l0 = kvcal_nvfp4_perm(t[0], t[1], m),
                   l1 = kvcal_nvfp4_perm(t[0], t[1], m >> 16);
    const uint32_t h0 = kvcal_nvfp4_perm(t[2], t[3], m) ^
                        (kvcal_nvfp4_perm(w4, w, 0x5140u) & 0x80808080u);
    const uint32_t h1 = kvcal_nvfp4_perm(t[2], t[3], m >> 16) ^
                        (kvcal_nvfp4_perm(w4, w, 0x7362u) & 0x80808080u);
    o[0] = kvcal_nvfp4_perm(l0, h0, 0x5140u);
    o[1] = kvcal_nvfp4_perm(l0, h0, 0x7362u);
    o[2] = kvcal_nvfp4_perm(l1, h1, 0x5140u);
    o[3] = kvcal_nvfp4_perm(l1, h1, 0x7362u);
}

#endif
