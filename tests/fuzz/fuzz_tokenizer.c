/* tests/fuzz/fuzz_tokenizer.c: libFuzzer target for the tokenizer loaders
 * (tokenizer.json, SentencePiece protobuf, llama2.c tokenizer.bin) and the
 * encoders. Any input must load or fail with a one-line error, never crash
 * or leak; a loaded tokenizer must encode the input itself to ids inside its
 * vocabulary and decode them again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private copy, so ASan sees reads past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    kvcal_tokenizer_t *tok = NULL;
    if (kvcal_tokenizer_load_memory(buf, size, "fuzz", &tok) != KVCAL_OK) {
        const char *msg = kvcal_last_error();
        if (!msg[0] || strchr(msg, '\n'))
            abort();
        free(buf);
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    size_t text_len = size < 4096 ? size : 4096;
    if (kvcal_tokenizer_encode(tok, (const char *)buf, text_len, 1, &ids, &n) ==
        KVCAL_OK) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= kvcal_tokenizer_vocab_size(tok))
                abort();
        char *text = NULL;
        if (kvcal_tokenizer_decode(tok, ids, n, &text) != KVCAL_OK)
            abort();
        free(text);
    }
    free(ids);
    kvcal_tokenizer_destroy(tok);
    free(buf);
    return 0;
}
