/* io/tokenizer/tokenizer_bpe.c: the BPE merge loop every tokenizer kind shares.
 *
 * Reference implementations pick, at each step, the adjacent pair with the
 * best priority (highest score for sentencepiece and llama2.c, lowest merge
 * rank for tokenizer.json), the leftmost one on ties. A binary heap keyed by
 * (priority, start offset) with lazy deletion of stale entries picks the same
 * pair in O(n log n). */
#include <stdlib.h>

#include "core/status.h"
#include "io/tokenizer/tokenizer_vocab.h"

kvcal_status kvcal_bpe_work_reserve(kvcal_bpe_work *w, size_t n_sym)
{
    if (n_sym > w->sym_cap) {
        size_t cap = w->sym_cap ? w->sym_cap : 64;
        while (cap < n_sym)
            cap *= 2;
        kvcal_bpe_sym *s = realloc(w->sym, cap * sizeof *s);
        if (!s)
            return kvcal_fail(KVCAL_ERR_NOMEM, "tokenizer: out of memory for %zu symbols",
                              cap);
        w->sym = s;
        w->sym_cap = cap;
    }
    return KVCAL_OK;
}

void kvcal_bpe_work_free(kvcal_bpe_work *w)
{
    free(w->sym);
    free(w->heap);
    w->sym = NULL;
    w->heap = NULL;
    w->sym_cap = w->heap_cap = 0;
}

static int item_before(const kvcal_bpe_heap_item *a, const kvcal_bpe_heap_item *b)
{
    return a->priority < b->priority ||
           (a->priority == b->priority && a->left_start < b->left_start);
}

static void heap_sift_up(kvcal_bpe_heap_item *h, size_t i)
{
    kvcal_bpe_heap_item x = h[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_before(&x, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static void heap_sift_down(kvcal_bpe_heap_item *h, size_t n, size_t i)
{
    kvcal_bpe_heap_item x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && item_before(&h[c + 1], &h[c]))
            c++;
        if (!item_before(&h[c], &x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Pushes the pair (left, left.next) when it merges. */
static kvcal_status push_pair(const kvcal_tokenizer_t *t, const char *text,
                              kvcal_bpe_work *w, size_t *n_heap, int32_t left,
                              kvcal_bpe_pair_fn pair)
{
    const kvcal_bpe_sym *a = &w->sym[left];
    if (a->next < 0 || !a->mergeable || !w->sym[a->next].mergeable)
        return KVCAL_OK;
    const kvcal_bpe_sym *b = &w->sym[a->next];
    double prio;
    int32_t merged;
    if (!pair(t, text, a, b, &prio, &merged))
        return KVCAL_OK;
    if (*n_heap == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        kvcal_bpe_heap_item *h = realloc(w->heap, cap * sizeof *h);
        if (!h)
            return kvcal_fail(KVCAL_ERR_NOMEM,
                              "tokenizer: out of memory for the merge queue");
        w->heap = h;
        w->heap_cap = cap;
    }
    w->heap[*n_heap] = (kvcal_bpe_heap_item){prio, left, a->start, b->end, merged};
    heap_sift_up(w->heap, (*n_heap)++);
    return KVCAL_OK;
}

kvcal_status kvcal_bpe_merge(const kvcal_tokenizer_t *t, const char *text,
                             kvcal_bpe_work *w, size_t n, kvcal_bpe_pair_fn pair)
{
    size_t n_heap = 0;
    kvcal_status st;
    for (size_t i = 0; i + 1 < n; i++)
        if ((st = push_pair(t, text, w, &n_heap, (int32_t)i, pair)))
            return st;
    while (n_heap) {
        kvcal_bpe_heap_item top = w->heap[0];
        w->heap[0] = w->heap[--n_heap];
        if (n_heap)
            heap_sift_down(w->heap, n_heap, 0);
        kvcal_bpe_sym *a = &w->sym[top.left];
        /* stale: the left symbol was absorbed (end marks it), or either
           side grew since the pair was queued */
        if (a->end == 0 || a->start != top.left_start || a->next < 0 ||
            w->sym[a->next].end != top.right_end)
            continue;
        kvcal_bpe_sym *b = &w->sym[a->next];
        a->id = top.merged;
        a->end = b->end;
        a->next = b->next;
        if (b->next >= 0)
            w->sym[b->next].prev = top.left;
        b->end = 0;
        b->next = b->prev = -1;
        if (a->prev >= 0 && (st = push_pair(t, text, w, &n_heap, a->prev, pair)))
            return st;
        if ((st = push_pair(t, text, w, &n_heap, top.left, pair)))
            return st;
    }
    return KVCAL_OK;
}
