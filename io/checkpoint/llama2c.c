/* io/checkpoint/llama2c.c: llama2.c "version 0" checkpoints, mapped read-only. */
#include "io/checkpoint/llama2c.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "io/file_read.h"
#include "io/json_file.h"

#define HEADER_INTS 7
#define LLAMA2C_MAGIC 0x616b3432u /* "ak42", llama2.c export version >= 1 */
#define MAX_SIZE (1 << 18)        /* per header field: keeps sizes within int64 */

struct kvcal_llama2c {
    kvcal_llama2c_config cfg;
    kvcal_llama2c_weights w;
    void *map;
    size_t map_len;
};

static int header_plausible(const int32_t h[HEADER_INTS])
{
    for (int i = 0; i < HEADER_INTS; i++) {
        int64_t v = i == 5 ? (h[i] < 0 ? -(int64_t)h[i] : h[i]) : h[i];
        if (v <= 0 || v > MAX_SIZE)
            return 0;
    }
    return h[0] % h[3] == 0 && h[3] % h[4] == 0;
}

int kvcal_llama2c_probe(const char *path)
{
    int32_t h[HEADER_INTS];
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    return n == (ssize_t)sizeof h && header_plausible(h);
}

/* Counts the floats of the weights and, when base is not NULL, sets the
 * weight pointers into it. */
static int64_t layout_weights(kvcal_llama2c_t *m, const float *base, int with_wcls)
{
    const kvcal_llama2c_config *c = &m->cfg;
    int64_t L = c->n_layers, D = c->dim, F = c->hidden_dim, V = c->vocab_size;
    int64_t hs = D / c->n_heads, kv = (int64_t)c->n_kv_heads * hs;
    int64_t off = 0;
#define TAKE(field, n)                                                                   \
    do {                                                                                 \
        if (base)                                                                        \
            m->w.field = base + off;                                                     \
        off += (n);                                                                      \
    } while (0)
    TAKE(token_embedding, V * D);
    TAKE(rms_att, L * D);
    TAKE(wq, L * D * D);
    TAKE(wk, L * kv * D);
    TAKE(wv, L * kv * D);
    TAKE(wo, L * D * D);
    TAKE(rms_ffn, L * D);
    TAKE(w1, L * F * D);
    TAKE(w2, L * D * F);
    TAKE(w3, L * F * D);
    TAKE(rms_final, D);
    off += (int64_t)c->seq_len * hs; /* freq_cis_real and _imag, unused */
    if (with_wcls)
        TAKE(wcls, V * D);
    else if (base)
        m->w.wcls = m->w.token_embedding;
#undef TAKE
    return off;
}

kvcal_status kvcal_llama2c_open(const char *path, kvcal_llama2c_t **out)
{
    *out = NULL;
    kvcal_status st;
    kvcal_llama2c_t *m = calloc(1, sizeof *m);
    if (!m)
        return kvcal_fail(KVCAL_ERR_NOMEM, "%s: out of memory", path);
    if ((st = kvcal_file_map(path, "llama2.c checkpoint", &m->map, &m->map_len)))
        goto fail;
    int32_t h[HEADER_INTS];
    if (m->map_len < sizeof h) {
        st = kvcal_fail(KVCAL_ERR_PARSE, "%s: too short for a llama2.c header (28 bytes)",
                        path);
        goto fail;
    }
    memcpy(h, m->map, sizeof h);
    if ((uint32_t)h[0] == LLAMA2C_MAGIC) {
        st = kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                        "%s: llama2.c export version %d (magic ak42) is not supported; "
                        "re-export with llama2.c's export.py --version 0",
                        path, h[1]);
        goto fail;
    }
    if (!header_plausible(h)) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: not a llama2.c checkpoint: header dim=%d hidden_dim=%d "
                        "n_layers=%d n_heads=%d n_kv_heads=%d vocab_size=%d seq_len=%d "
                        "(sizes must be positive, dim divisible by n_heads, n_heads by "
                        "n_kv_heads)",
                        path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
        goto fail;
    }
    if ((h[0] / h[3]) % 2) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: header dim=%d n_heads=%d gives an odd head size %d; "
                        "llama2.c's RoPE rotates pairs of a head's channels, so no "
                        "llama2.c model has one: the header is damaged or the file is "
                        "not a llama2.c checkpoint",
                        path, h[0], h[3], h[0] / h[3]);
        goto fail;
    }
    m->cfg = (kvcal_llama2c_config){
        h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
    int64_t want = layout_weights(m, NULL, !m->cfg.shared_classifier);
    size_t weight_bytes = m->map_len - sizeof h;
    if (want != (int64_t)(weight_bytes / sizeof(float)) || weight_bytes % sizeof(float)) {
        st = kvcal_fail(KVCAL_ERR_FORMAT,
                        "%s: file holds %lld bytes of weights but its header (dim %d, "
                        "%d layers, vocab %d, %s classifier) needs %lld: truncated or "
                        "not a llama2.c version 0 checkpoint",
                        path, (long long)weight_bytes, m->cfg.dim, m->cfg.n_layers,
                        m->cfg.vocab_size,
                        m->cfg.shared_classifier ? "shared" : "separate",
                        (long long)want * (long long)sizeof(float));
        goto fail;
    }
    layout_weights(m, (const float *)((const char *)m->map + sizeof h),
                   !m->cfg.shared_classifier);
    *out = m;
    return KVCAL_OK;
fail:
    kvcal_llama2c_close(m);
    return st;
}

void kvcal_llama2c_close(kvcal_llama2c_t *m)
{
    if (!m)
        return;
    kvcal_file_unmap(m->map, m->map_len);
    free(m);
}

const kvcal_llama2c_config *kvcal_llama2c_config_get(const kvcal_llama2c_t *m)
{
    return &m->cfg;
}

const kvcal_llama2c_weights *kvcal_llama2c_weights_get(const kvcal_llama2c_t *m)
{
    return &m->w;
}

kvcal_status kvcal_llama2c_write_hf_config(const kvcal_llama2c_config *c,
                                           const char *path)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "hidden_size", c->dim);
    cJSON_AddNumberToObject(j, "intermediate_size", c->hidden_dim);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->dim / c->n_heads);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->seq_len);
    cJSON_AddNumberToObject(j, "rms_norm_eps", KVCAL_LLAMA2C_NORM_EPS);
    cJSON_AddNumberToObject(j, "rope_theta", KVCAL_LLAMA2C_ROPE_THETA);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->shared_classifier);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    kvcal_status st = kvcal_json_write(path, j);
    cJSON_Delete(j);
    return st;
}
