/* io/checkpoint/mxfp4.h: MXFP4 tensors (the OCP Microscaling format's FP4) as
 * the released gpt-oss checkpoints store their experts, and as transformers'
 * convert_moe_packed_tensors and vLLM's / sglang's gpt-oss loaders read
 * them: a tensor of (rows, cols) values is held as <name>_blocks (rows, cols /
 * 32, 16) uint8, two e2m1 values a byte (value 2i in the low nibble, 2i + 1
 * in the high one), and <name>_scales (rows, cols / 32) uint8, an e8m0
 * exponent per 32 consecutive values: value = e2m1 * 2^(scale - 127). */
#ifndef KVCAL_IO_MXFP4_H
#define KVCAL_IO_MXFP4_H

#include <stdint.h>

/* Values a scale covers. */
#define KVCAL_MXFP4_BLOCK 32

/* out (n) = values first .. first + n - 1 of an MXFP4 tensor in row-major
 * order (blocks and scales as above, counted from the tensor's first
 * value); exact in float (2^(scale - 127) times a value of two significant
 * bits; a scale of 255 gives Inf or NaN, as ldexp does in transformers). */
void kvcal_mxfp4_to_f32(const uint8_t *blocks, const uint8_t *scales, int64_t first,
                        int64_t n, float *out);

#endif
