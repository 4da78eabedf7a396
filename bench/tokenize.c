/* bench/tokenize.c: encoding speed of each tokenizer kind on one core.
 *
 *   build/bench/tokenize [CORPUS [TOKENIZER...]]
 *
 * Defaults: ../shared/corpora/wikitext2_raw_test_hfjoin.txt and one
 * tokenizer of each kind (the committed fixtures and ../shared models).
 * The corpus is split into documents on blank lines, as the dataset reader
 * does; every document is encoded once to validate (decode(encode(doc))
 * must give the document back, less the one leading space SentencePiece-style
 * decoders drop) and then timed: the median of 5 passes over all documents,
 * reported in MB/s of input text and tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/tokenizer/tokenizer.h"
#include "kvcal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct doc {
    const char *p;
    size_t n;
} doc;

/* Runs of non-blank lines, as io/dataset/dataset.c splits plain text. */
static size_t split_docs(const char *text, size_t len, doc *out)
{
    size_t n = 0, i = 0, start = 0, end = 0;
    int in = 0;
    while (i <= len) {
        size_t e = i;
        while (e < len && text[e] != '\n')
            e++;
        int blank = 1;
        for (size_t k = i; k < e; k++)
            blank &= text[k] == ' ' || text[k] == '\t' || text[k] == '\r';
        if (!blank) {
            if (!in)
                start = i;
            in = 1;
            end = e;
        } else if (in) {
            out[n++] = (doc){text + start, end - start};
            in = 0;
        }
        i = e + 1;
    }
    if (in)
        out[n++] = (doc){text + start, end - start};
    return n;
}

static int bench_one(const char *path, const doc *docs, size_t n_docs, size_t bytes)
{
    kvcal_tokenizer_t *tok = NULL;
    if (kvcal_tokenizer_load(path, &tok)) {
        fprintf(stderr, "tokenize: %s\n", kvcal_last_error());
        return 1;
    }
    /* validate */
    long long tokens = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n_docs; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *back = NULL;
        if (kvcal_tokenizer_encode(tok, docs[i].p, docs[i].n, 0, &ids, &n) ||
            kvcal_tokenizer_decode(tok, ids, n, &back)) {
            fprintf(stderr, "tokenize: %s: %s\n", path, kvcal_last_error());
            kvcal_tokenizer_destroy(tok);
            return 1;
        }
        size_t m = strlen(back);
        int same = m == docs[i].n && !memcmp(back, docs[i].p, m);
        int same_less_space = docs[i].n && docs[i].p[0] == ' ' && m + 1 == docs[i].n &&
                              !memcmp(back, docs[i].p + 1, m);
        bad += !(same || same_less_space);
        tokens += (long long)n;
        free(ids);
        free(back);
    }
    /* time */
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (size_t i = 0; i < n_docs; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            kvcal_tokenizer_encode(tok, docs[i].p, docs[i].n, 0, &ids, &n);
            free(ids);
        }
        t[r] = now_s() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_double);
    printf("%-22s %-52s %8.2f MB/s %10.0f tokens/s  %lld tokens  %.3f s  roundtrip %s "
           "(%zu of %zu docs differ)\n",
           kvcal_tokenizer_kind(tok), path, (double)bytes / t[2] / 1e6,
           (double)tokens / t[2], tokens, t[2], bad ? "FAILED" : "ok", bad, n_docs);
    kvcal_tokenizer_destroy(tok);
    return bad != 0;
}

int main(int argc, char **argv)
{
    const char *corpus =
        argc > 1 ? argv[1] : "../shared/corpora/wikitext2_raw_test_hfjoin.txt";
    static const char *const defaults[] = {
        "tests/fixtures/tokenizer/bytelevel/tokenizer.json",
        "tests/fixtures/tokenizer/spmbpe/tokenizer.json",
        "../shared/models/llama2-tokenizer/tokenizer.model",
        "../shared/models/llama2-tokenizer/tokenizer.bin",
        "../shared/models/stories260K/tok512.bin",
    };
    FILE *f = fopen(corpus, "rb");
    if (!f) {
        perror(corpus);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    doc *docs = malloc(((size_t)len / 2 + 2) * sizeof *docs);
    if (!text || !docs || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "tokenize: cannot read %s\n", corpus);
        return 2;
    }
    fclose(f);
    size_t n_docs = split_docs(text, (size_t)len, docs);
    size_t bytes = 0;
    for (size_t i = 0; i < n_docs; i++)
        bytes += docs[i].n;
    printf("corpus %s: %zu documents, %zu bytes of text; one core, median of 5 passes\n",
           corpus, n_docs, bytes);
    int rc = 0;
    if (argc > 2)
        for (int i = 2; i < argc; i++)
            rc |= bench_one(argv[i], docs, n_docs, bytes);
    else
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
            rc |= bench_one(defaults[i], docs, n_docs, bytes);
    free(docs);
    free(text);
    return rc;
}
