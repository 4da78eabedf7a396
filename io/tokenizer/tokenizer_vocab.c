/* io/tokenizer/tokenizer_vocab.c: what every tokenizer kind builds on
 * (tokenizer_vocab.h): the piece table and its hash map, id buffers, the BPE
 * pair map, byte pieces. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer_vocab.h"

kvcal_status kvcal_ids_push(kvcal_ids *b, int32_t id)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return kvcal_fail(KVCAL_ERR_NOMEM,
                              "tokenizer: out of memory for %zu token ids", cap);
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = id;
    return KVCAL_OK;
}

uint64_t kvcal_hash_bytes(const void *p, size_t n)
{
    /* FNV-1a, 64 bit */
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h;
}

kvcal_status kvcal_tok_alloc(kvcal_tokenizer_t *t, int n, size_t total_bytes)
{
    t->vocab_size = n;
    t->piece_data = malloc(total_bytes + 1);
    t->piece_off = calloc((size_t)n + 1, sizeof *t->piece_off);
    t->scores = calloc((size_t)n, sizeof *t->scores);
    t->piece_type = calloc((size_t)n, 1);
    if (!t->piece_data || !t->piece_off || !t->scores || !t->piece_type)
        return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory for %d pieces", n);
    return KVCAL_OK;
}

kvcal_status kvcal_tok_build_map(kvcal_tokenizer_t *t,
                                 int (*keep)(const kvcal_tokenizer_t *, int32_t))
{
    uint32_t cap = 16;
    while (cap < (uint32_t)t->vocab_size * 2u)
        cap <<= 1;
    free(t->map.slots);
    t->map.slots = malloc(cap * sizeof *t->map.slots);
    if (!t->map.slots)
        return kvcal_fail(KVCAL_ERR_NOMEM,
                          "tokenizer: out of memory for the vocabulary map");
    memset(t->map.slots, 0xff, cap * sizeof *t->map.slots);
    t->map.mask = cap - 1;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        if (keep && !keep(t, id))
            continue;
        size_t len;
        const char *s = kvcal_tok_piece(t, id, &len);
        uint32_t i = (uint32_t)kvcal_hash_bytes(s, len) & t->map.mask;
        for (;; i = (i + 1) & t->map.mask) {
            int32_t o = t->map.slots[i];
            if (o < 0) {
                t->map.slots[i] = id;
                break;
            }
            size_t olen;
            const char *os = kvcal_tok_piece(t, o, &olen);
            if (olen == len && !memcmp(os, s, len))
                break; /* duplicate piece: the lower id stays */
        }
    }
    return KVCAL_OK;
}

int32_t kvcal_tok_lookup(const kvcal_tokenizer_t *t, const char *s, size_t n)
{
    uint32_t i = (uint32_t)kvcal_hash_bytes(s, n) & t->map.mask;
    for (;; i = (i + 1) & t->map.mask) {
        int32_t o = t->map.slots[i];
        if (o < 0)
            return -1;
        size_t olen;
        const char *os = kvcal_tok_piece(t, o, &olen);
        if (olen == n && !memcmp(os, s, n))
            return o;
    }
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int kvcal_tok_byte_piece(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

int kvcal_tok_words_independent(const kvcal_tokenizer_t *t, const char *marker,
                                int (*keep)(const kvcal_tokenizer_t *, int32_t))
{
    size_t wl = strlen(marker);
    for (int32_t id = 0; id < t->vocab_size; id++) {
        size_t n;
        const char *p = kvcal_tok_piece(t, id, &n);
        if ((keep && !keep(t, id)) || n <= wl)
            continue;
        int only = n % wl == 0;
        for (size_t k = 0; k + wl <= n && only; k += wl)
            only = !memcmp(p + k, marker, wl);
        if (only)
            continue;
        for (size_t k = 1; k + wl <= n; k++)
            if (!memcmp(p + k, marker, wl))
                return 0;
    }
    return 1;
}

void kvcal_tok_find_byte_pieces(kvcal_tokenizer_t *t)
{
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        size_t len;
        const char *s = kvcal_tok_piece(t, id, &len);
        int b = kvcal_tok_byte_piece(s, len);
        if (b >= 0 && t->byte_id[b] < 0)
            t->byte_id[b] = id;
    }
}

kvcal_status kvcal_pairmap_init(kvcal_pairmap *m, size_t n)
{
    if (n > (1u << 28))
        return kvcal_fail(KVCAL_ERR_FORMAT,
                          "tokenizer: %zu merges is more than kvcal takes", n);
    uint32_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    m->mask = cap - 1;
    m->keys = malloc(cap * sizeof *m->keys);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged)
        return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n);
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    return KVCAL_OK;
}

void kvcal_pairmap_free(kvcal_pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->merged);
    memset(m, 0, sizeof *m);
}

static uint32_t pair_slot(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key;
}

void kvcal_pairmap_put(kvcal_pairmap *m, int32_t a, int32_t b, int32_t rank,
                       int32_t merged)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = pair_slot(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key)
            return;
        if (m->keys[i] == UINT64_MAX) {
            m->keys[i] = key;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}

int kvcal_pairmap_get(const kvcal_pairmap *m, int32_t a, int32_t b, int32_t *rank,
                      int32_t *merged)
{
    if (!m->keys)
        return 0;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = pair_slot(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return 1;
        }
        if (m->keys[i] == UINT64_MAX)
            return 0;
    }
}

int32_t kvcal_tok_id_of(const kvcal_tokenizer_t *t, const char *s)
{
    if (!s)
        return -1;
    size_t n = strlen(s);
    for (int i = 0; i < t->n_added; i++) {
        size_t m;
        const char *p = kvcal_tok_piece(t, t->added[i].id, &m);
        if (m == n && !memcmp(p, s, n))
            return t->added[i].id;
    }
    int32_t id = kvcal_tok_lookup(t, s, n);
    for (int32_t k = 0; id < 0 && k < t->vocab_size; k++) { /* pieces outside the map */
        size_t m;
        const char *p = kvcal_tok_piece(t, k, &m);
        if (m == n && !memcmp(p, s, n))
            id = k;
    }
    return id;
}
