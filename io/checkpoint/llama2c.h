/* io/checkpoint/llama2c.h: llama2.c checkpoints (karpathy/llama2.c run.c, "version 0"
 * export): a header of 7 int32 (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means the classifier
 * is stored apart from the embedding), then fp32 weights in run.c's order.
 * The file is mapped read-only; weights are pointers into the mapping.
 * RoPE of these models rotates adjacent (interleaved) pairs, theta 10000. */
#ifndef KVCAL_IO_LLAMA2C_H
#define KVCAL_IO_LLAMA2C_H

#include "kvcal.h"

/* What run.c fixes for every checkpoint: RoPE base and RMSNorm epsilon. */
#define KVCAL_LLAMA2C_ROPE_THETA 10000.0
#define KVCAL_LLAMA2C_NORM_EPS 1e-5

typedef struct kvcal_llama2c_config {
    int dim;
    int hidden_dim;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int vocab_size; /* absolute value of the header's field */
    int seq_len;
    int shared_classifier; /* 1 when the classifier is the embedding */
} kvcal_llama2c_config;

/* Pointers into the mapping; per-layer arrays are stacked over layers.
 * Linear weights are (out, in) row-major like nn.Linear. */
typedef struct kvcal_llama2c_weights {
    const float *token_embedding; /* (vocab, dim) */
    const float *rms_att;         /* (n_layers, dim) */
    const float *wq;              /* (n_layers, n_heads * head_size, dim) */
    const float *wk;              /* (n_layers, n_kv_heads * head_size, dim) */
    const float *wv;              /* (n_layers, n_kv_heads * head_size, dim) */
    const float *wo;              /* (n_layers, dim, n_heads * head_size) */
    const float *rms_ffn;         /* (n_layers, dim) */
    const float *w1;              /* (n_layers, hidden_dim, dim) gate */
    const float *w2;              /* (n_layers, dim, hidden_dim) down */
    const float *w3;              /* (n_layers, hidden_dim, dim) up */
    const float *rms_final;       /* (dim) */
    const float *wcls;            /* (vocab, dim); the embedding when shared */
} kvcal_llama2c_weights;

typedef struct kvcal_llama2c kvcal_llama2c_t;

/* Maps `path` and checks the header (positive sizes, dim divisible by
 * n_heads, n_heads by n_kv_heads, an even head size: run.c's RoPE pairs a
 * head's channels) and that the file size is exactly what the
 * header implies. A newer llama2.c export (magic "ak42") is refused with the
 * re-export hint. *out = NULL on failure; close with kvcal_llama2c_close. */
kvcal_status kvcal_llama2c_open(const char *path, kvcal_llama2c_t **out);

/* Unmaps and frees; NULL is a no-op. */
void kvcal_llama2c_close(kvcal_llama2c_t *m);

/* Owned by the handle, valid until close. */
const kvcal_llama2c_config *kvcal_llama2c_config_get(const kvcal_llama2c_t *m);
const kvcal_llama2c_weights *kvcal_llama2c_weights_get(const kvcal_llama2c_t *m);

/* Writes config.json at `path` describing the checkpoint of c as the
 * equivalent LlamaForCausalLM (run.c's rms_norm_eps 1e-5 and rope_theta
 * 10000, float32), for the formats that merge into a model's config. */
kvcal_status kvcal_llama2c_write_hf_config(const kvcal_llama2c_config *c,
                                           const char *path);

/* 1 when the first bytes of the file at `path` look like a llama2.c
 * checkpoint header (7 plausible int32), 0 otherwise (unreadable, or not a
 * regular file: a FIFO is never opened). */
int kvcal_llama2c_probe(const char *path);

#endif
