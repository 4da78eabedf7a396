/* tests/fuzz/fuzz_dataset.c: libFuzzer target for the dataset reader on a
 * file whose bytes are the input, read as plain text (.txt) and as JSONL of
 * text, chat messages or token ids (.jsonl), as kvcal calibrate reads
 * --dataset (the stories260K
 * tokenizer, models/stories260K/tok512.bin). Any file must give samples or
 * a one-line error, never a crash or a leak; every sample of accepted ones
 * holds lengths[i] <= seq_len ids inside the vocabulary (or taken verbatim:
 * >= 0), padding -1 after them, and num_tokens their sum. Run from the
 * source tree. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status.h"
#include "io/dataset/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[2][64]; /* the input as .txt and as .jsonl */
static kvcal_tokenizer_t *tok;

static void cleanup(void)
{
    unlink(path[0]);
    unlink(path[1]);
    kvcal_tokenizer_destroy(tok);
}

static void check(const kvcal_samples *s, int seq_len)
{
    long long sum = 0;
    if (s->seq_len != seq_len || s->num_samples < 1)
        abort();
    for (int i = 0; i < s->num_samples; i++) {
        const int32_t *row = s->ids + (size_t)i * (size_t)seq_len;
        if (s->lengths[i] < 1 || s->lengths[i] > seq_len)
            abort();
        for (int t = 0; t < seq_len; t++)
            if (t < s->lengths[i] ? row[t] < 0 : row[t] != -1)
                abort();
        sum += s->lengths[i];
    }
    if (sum != s->num_tokens)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok) {
        static const char *const ext[2] = {".txt", ".jsonl"};
        for (int i = 0; i < 2; i++) {
            snprintf(path[i], sizeof path[i], "/tmp/kvcal-fuzz-dataset-XXXXXX%s", ext[i]);
            int fd = mkstemps(path[i], (int)strlen(ext[i]));
            if (fd < 0 || close(fd))
                abort();
        }
        if (kvcal_tokenizer_load("models/stories260K/tok512.bin", &tok) != KVCAL_OK ||
            atexit(cleanup))
            abort();
    }
    for (int kind = 0; kind < 2; kind++) {
        FILE *f = fopen(path[kind], "wb");
        if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f))
            abort();
        /* both ways a run takes its samples: packed windows, one document each */
        for (int pack = 0; pack < 2; pack++) {
            const kvcal_dataset_options o = {0, 16, 7, pack, NULL};
            kvcal_samples *s = NULL;
            if (kvcal_dataset_load(path[kind], tok, &o, &s) != KVCAL_OK) {
                const char *msg = kvcal_last_error();
                if (s || !msg[0] || strchr(msg, '\n'))
                    abort();
                continue;
            }
            check(s, o.seq_len);
            kvcal_samples_destroy(s);
        }
    }
    return 0;
}
