/* kvcal_quant.h: online FP8 KV quantization (included by kvcal.h).
 * The declarations arrive with the online scaling library. */
#ifndef KVCAL_QUANT_H
#define KVCAL_QUANT_H
#endif
