/* io/tokenizer/tokenizer_nfc.c: Unicode NFC (canonical decomposition, canonical
 * ordering, canonical composition; UAX #15), for tokenizer.json files that
 * declare an NFC normalizer. Text made only of code points that can neither
 * change nor combine is returned as it is without decoding it. */
#include "io/tokenizer/tokenizer_nfc.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer_vocab.h"

enum {
    HANGUL_S = 0xAC00,
    HANGUL_L = 0x1100,
    HANGUL_V = 0x1161,
    HANGUL_T = 0x11A7,
    HANGUL_LN = 19,
    HANGUL_VN = 21,
    HANGUL_TN = 28,
    HANGUL_NN = 21 * 28,
    HANGUL_SN = 19 * 21 * 28
};

static int ccc_of(uint32_t cp)
{
    int lo = 0, hi = kvcal_nfc_n_ccc - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kvcal_nfc_ccc[mid].first)
            hi = mid - 1;
        else if (cp > kvcal_nfc_ccc[mid].last)
            lo = mid + 1;
        else
            return kvcal_nfc_ccc[mid].ccc;
    }
    return 0;
}

static const kvcal_nfc_decomp_entry *decomp_of(uint32_t cp)
{
    int lo = 0, hi = kvcal_nfc_n_decomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kvcal_nfc_decomp[mid].cp)
            hi = mid - 1;
        else if (cp > kvcal_nfc_decomp[mid].cp)
            lo = mid + 1;
        else
            return &kvcal_nfc_decomp[mid];
    }
    return NULL;
}

static int is_second(uint32_t cp)
{
    int lo = 0, hi = kvcal_nfc_n_second - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < kvcal_nfc_second[mid])
            hi = mid - 1;
        else if (cp > kvcal_nfc_second[mid])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* Composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V &&
        b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    int lo = 0, hi = kvcal_nfc_n_comp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const kvcal_nfc_comp_entry *e = &kvcal_nfc_comp[mid];
        if (a < e->first || (a == e->first && b < e->second))
            hi = mid - 1;
        else if (a > e->first || b > e->second)
            lo = mid + 1;
        else
            return e->composite;
    }
    return 0;
}

/* A code point NFC leaves alone whatever surrounds it. */
static int is_inert(uint32_t cp)
{
    if (cp < 0x300)
        return 1;
    if ((cp >= HANGUL_L && cp < 0x1200) || (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN))
        return 0;
    return !ccc_of(cp) && !decomp_of(cp) && !is_second(cp);
}

static uint32_t utf8_decode(const unsigned char *s, size_t l)
{
    if (l == 1)
        return s[0];
    uint32_t cp = s[0] & (0xFF >> (l + 1));
    for (size_t i = 1; i < l; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

static size_t utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

kvcal_status kvcal_nfc(const char *text, size_t len, char **out, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)text;
    int inert = 1;
    for (size_t i = 0; i < len && inert;) {
        size_t l = u[i] < 0x80 ? 1 : kvcal_utf8_char_len(u + i, len - i);
        inert = l && is_inert(utf8_decode(u + i, l));
        i += l;
    }
    if (inert || kvcal_utf8_check(text, len) != len) {
        *out = malloc(len + 1);
        if (!*out)
            return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory normalizing");
        memcpy(*out, text, len);
        *out_len = len;
        return KVCAL_OK;
    }
    /* decompose: at most 4 code points per input code point (Hangul: 3) */
    uint32_t *cp = malloc((len * 4 + 1) * sizeof *cp);
    uint8_t *cc = malloc(len * 4 + 1);
    char *o = malloc(len * 4 + 4);
    if (!cp || !cc || !o) {
        free(cp);
        free(cc);
        free(o);
        return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory normalizing");
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t l = kvcal_utf8_char_len(u + i, len - i);
        uint32_t c = utf8_decode(u + i, l);
        i += l;
        const kvcal_nfc_decomp_entry *d;
        if (c >= HANGUL_S && c < HANGUL_S + HANGUL_SN) {
            uint32_t s = c - HANGUL_S;
            cp[n++] = HANGUL_L + s / HANGUL_NN;
            cp[n++] = HANGUL_V + (s % HANGUL_NN) / HANGUL_TN;
            if (s % HANGUL_TN)
                cp[n++] = HANGUL_T + s % HANGUL_TN;
        } else if ((d = decomp_of(c)))
            for (int k = 0; k < d->len; k++)
                cp[n++] = d->d[k];
        else
            cp[n++] = c;
    }
    for (size_t i = 0; i < n; i++)
        cc[i] = (uint8_t)ccc_of(cp[i]);
    /* canonical ordering: stable insertion sort of each run of non-starters */
    for (size_t i = 1; i < n; i++) {
        if (!cc[i])
            continue;
        uint32_t c = cp[i];
        uint8_t k = cc[i];
        size_t j = i;
        while (j > 0 && cc[j - 1] > k) {
            cp[j] = cp[j - 1];
            cc[j] = cc[j - 1];
            j--;
        }
        cp[j] = c;
        cc[j] = k;
    }
    /* canonical composition */
    size_t m = 0;      /* code points kept */
    long starter = -1; /* index in the kept list of the last starter */
    int last_cc = -1;  /* class of the last kept char after the starter */
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        int k = cc[i];
        /* c reaches the starter unless a kept char in between has a class
           >= its own (a starter in between would have become the starter) */
        if (starter >= 0 && (last_cc == -1 || last_cc < k)) {
            uint32_t comp = compose(cp[starter], c);
            if (comp) {
                cp[starter] = comp;
                continue;
            }
        }
        if (k == 0) {
            starter = (long)m;
            last_cc = -1;
        } else
            last_cc = k;
        cp[m] = c;
        cc[m] = (uint8_t)k;
        m++;
    }
    size_t ol = 0;
    for (size_t i = 0; i < m; i++)
        ol += utf8_encode(cp[i], o + ol);
    free(cp);
    free(cc);
    *out = o;
    *out_len = ol;
    return KVCAL_OK;
}
