/* io/tokenizer/tokenizer_vocab.h: what the tokenizer kinds share (not
 * installed, not part of the library's interface).
 *
 * Every kind fills one kvcal_tokenizer: a vocabulary of byte strings
 * (pieces) with an id -> piece table and a piece -> id hash map, and the
 * merge rule of its BPE flavour. The BPE merge loop itself is shared
 * (tokenizer_bpe.c): symbols in a linked list, candidate pairs in a binary
 * heap ordered by (priority, position), so the pair a reference
 * implementation would pick first (best score / lowest rank, leftmost on
 * ties) is always the one merged. */
#ifndef KVCAL_IO_TOKENIZER_VOCAB_H
#define KVCAL_IO_TOKENIZER_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "io/utf8.h"
#include "kvcal.h"

/* The handle of io/tokenizer/tokenizer.h, whose fields this header defines. */
typedef struct kvcal_tokenizer kvcal_tokenizer_t;

typedef enum kvcal_tok_kind {
    KVCAL_TOK_HF_BYTELEVEL = 0,
    KVCAL_TOK_HF_SENTENCEPIECE = 1,
    KVCAL_TOK_SENTENCEPIECE = 2,
    KVCAL_TOK_LLAMA2C = 3
} kvcal_tok_kind;

/* --- growable id buffer --------------------------------------------------- */

typedef struct kvcal_ids {
    int32_t *v;
    size_t n, cap;
} kvcal_ids;

kvcal_status kvcal_ids_push(kvcal_ids *b, int32_t id);

/* --- hash map: byte string -> id (keys are pieces owned by the table) ----- */

typedef struct kvcal_strmap {
    uint32_t mask;  /* capacity - 1 (power of two) */
    int32_t *slots; /* (mask + 1) ids, -1 when empty */
} kvcal_strmap;

uint64_t kvcal_hash_bytes(const void *p, size_t n);

/* --- hash map: (left id, right id) -> (rank, merged id) ------------------- */

typedef struct kvcal_pairmap {
    uint32_t mask;
    uint64_t *keys;  /* (mask + 1) left << 32 | right; UINT64_MAX when empty */
    int32_t *rank;   /* (mask + 1) */
    int32_t *merged; /* (mask + 1) */
} kvcal_pairmap;

kvcal_status kvcal_pairmap_init(kvcal_pairmap *m, size_t n);
void kvcal_pairmap_free(kvcal_pairmap *m);
/* Keeps the first insertion of a pair (the best-ranked merge). */
void kvcal_pairmap_put(kvcal_pairmap *m, int32_t a, int32_t b, int32_t rank,
                       int32_t merged);
/* 1 and rank / merged id when the pair is a merge, else 0. */
int kvcal_pairmap_get(const kvcal_pairmap *m, int32_t a, int32_t b, int32_t *rank,
                      int32_t *merged);

/* --- the tokenizer --------------------------------------------------------- */

#define KVCAL_TOK_MAX_SPLITS 4
#define KVCAL_TOK_MAX_NORM 8

/* A normalizer step of a tokenizer.json: Prepend(a), Replace(a -> b), NFC. */
enum { KVCAL_NORM_PREPEND = 0, KVCAL_NORM_REPLACE = 1, KVCAL_NORM_NFC = 2 };
typedef struct kvcal_norm_step {
    int op;      /* KVCAL_NORM_* */
    char *a, *b; /* owned */
    size_t la, lb;
} kvcal_norm_step;

/* An added (special) token of a tokenizer.json, matched in raw text before
 * pre-tokenization. */
typedef struct kvcal_added_token {
    int32_t id;
    int special;
    int lstrip, rstrip;
} kvcal_added_token;

struct kvcal_tokenizer {
    kvcal_tok_kind kind;
    char *path; /* the file it was loaded from (owned): named in encode errors */
    int vocab_size;
    char *piece_data;      /* all pieces, back to back */
    uint32_t *piece_off;   /* (vocab_size + 1) offsets into piece_data */
    float *scores;         /* (vocab_size) merge scores (llama2c, sentencepiece) */
    uint8_t *piece_type;   /* (vocab_size) KVCAL_PIECE_* */
    kvcal_strmap map;      /* piece -> id, over mergeable pieces */
    int32_t bos, eos, unk; /* -1 when none */
    int add_bos, add_eos;  /* what add_special = 1 adds */
    int32_t byte_id[256];  /* id of each byte's fallback token (<0xXX> or the
                              byte-level character), -1 when none */

    /* sentencepiece normalizer (sentencepiece; Metaspace for hf) */
    int add_dummy_prefix;
    int remove_extra_whitespaces;
    int escape_whitespaces;
    int byte_fallback;
    int n_user_defined; /* pieces matched whole before merging */

    /* hf tokenizer.json */
    kvcal_pairmap merges;
    int ignore_merges; /* a whole pre-token found in the vocabulary wins */
    int fuse_unk;
    int n_split;                             /* regex Split steps of the pre-tokenizer */
    void *split_re[KVCAL_TOK_MAX_SPLITS];    /* pcre2_code_8 * */
    int split_removed[KVCAL_TOK_MAX_SPLITS]; /* behavior Removed (else Isolated) */
    int prefix_space;                        /* ByteLevel add_prefix_space */
    int metaspace;                           /* Metaspace pre-tokenizer present */
    int metaspace_prepend;                   /* 0 never, 1 first, 2 always */
    int split_words; /* Metaspace split = true; sentencepiece: words merge one by one */
    int words_independent; /* tokenizer.json: words merge one by one */
    int n_norm;            /* normalizer steps */
    kvcal_norm_step norm[KVCAL_TOK_MAX_NORM];
    int strip_leading_space; /* decoder drops one leading space */
    int n_added;
    kvcal_added_token *added; /* (n_added) longest content first */
    uint8_t added_first[256]; /* 1 when some added token starts with the byte */
};

/* piece_type values */
enum {
    KVCAL_PIECE_NORMAL = 1,
    KVCAL_PIECE_UNKNOWN = 2,
    KVCAL_PIECE_CONTROL = 3,
    KVCAL_PIECE_USER_DEFINED = 4,
    KVCAL_PIECE_UNUSED = 5,
    KVCAL_PIECE_BYTE = 6
};

static inline const char *kvcal_tok_piece(const kvcal_tokenizer_t *t, int32_t id,
                                          size_t *len)
{
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece_data + t->piece_off[id];
}

/* Allocates the piece tables for n pieces of total_bytes bytes. */
kvcal_status kvcal_tok_alloc(kvcal_tokenizer_t *t, int n, size_t total_bytes);
/* Builds t->map over every piece for which keep(t, id) is true (NULL: all);
 * the lowest id wins for duplicate pieces. */
kvcal_status kvcal_tok_build_map(kvcal_tokenizer_t *t,
                                 int (*keep)(const kvcal_tokenizer_t *, int32_t));
/* Id of a piece, -1 when absent from the map. */
int32_t kvcal_tok_lookup(const kvcal_tokenizer_t *t, const char *s, size_t n);
/* The id of piece s (NUL-terminated; NULL: -1): an added token's first,
 * then the map's, then any piece outside the map; -1 when none. */
int32_t kvcal_tok_id_of(const kvcal_tokenizer_t *t, const char *s);
/* The byte a piece "<0xXX>" stands for (upper-case hex), else -1. */
int kvcal_tok_byte_piece(const char *s, size_t len);
/* 1 when no piece (of those keep() accepts; NULL: all) holds `marker` (the
 * space mark) after its first byte, unless the piece is only markers: merges
 * then never cross the start of a word (a marker after something else), and
 * words can be merged one by one with the same result. */
int kvcal_tok_words_independent(const kvcal_tokenizer_t *t, const char *marker,
                                int (*keep)(const kvcal_tokenizer_t *, int32_t));
/* Fills byte_id[] from pieces named "<0xXX>". */
void kvcal_tok_find_byte_pieces(kvcal_tokenizer_t *t);

/* --- UTF-8 ----------------------------------------------------------------- */

/* --- shared BPE merge loop --------------------------------------------------- */

typedef struct kvcal_bpe_sym {
    int32_t id;          /* token id, or -1 while unknown */
    uint32_t start, end; /* byte span in the encoded string */
    int32_t prev, next;  /* neighbours in the list, -1 at the ends */
    int mergeable;       /* 0: never part of a merge (byte fallback tokens) */
} kvcal_bpe_sym;

/* Decides whether two adjacent symbols merge: returns 1 and sets *priority
 * (smaller merges first) and *merged (id of the result), else returns 0. */
typedef int (*kvcal_bpe_pair_fn)(const kvcal_tokenizer_t *t, const char *text,
                                 const kvcal_bpe_sym *a, const kvcal_bpe_sym *b,
                                 double *priority, int32_t *merged);

typedef struct kvcal_bpe_heap_item {
    double priority;
    int32_t left;                   /* index of the left symbol */
    uint32_t left_start, right_end; /* spans when pushed, to detect stale items */
    int32_t merged;
} kvcal_bpe_heap_item;

/* Scratch space reused across calls (grows as needed; free with
 * kvcal_bpe_work_free). */
typedef struct kvcal_bpe_work {
    kvcal_bpe_sym *sym;
    size_t sym_cap;
    kvcal_bpe_heap_item *heap;
    size_t heap_cap;
} kvcal_bpe_work;

kvcal_status kvcal_bpe_work_reserve(kvcal_bpe_work *w, size_t n_sym);
void kvcal_bpe_work_free(kvcal_bpe_work *w);

/* Merges the n symbols in w->sym (linked 0..n-1 by the caller) until no pair
 * merges, always taking the lowest (priority, left position) first. The
 * surviving symbols are reachable from index 0 through next. */
kvcal_status kvcal_bpe_merge(const kvcal_tokenizer_t *t, const char *text,
                             kvcal_bpe_work *w, size_t n, kvcal_bpe_pair_fn pair);

#endif
