/* io/dataset/doclist.c: the documents of a dataset (see doclist.h). */
#include "io/dataset/doclist.h"

#include <stdlib.h>
#include <string.h>

#include "core/status.h"

void kvcal_doclist_free(kvcal_doclist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->d[i].owned_text);
        free(l->d[i].ids);
    }
    free(l->d);
    for (size_t i = 0; i < l->n_bufs; i++)
        free(l->bufs[i]);
    free(l->bufs);
    memset(l, 0, sizeof *l);
}

kvcal_status kvcal_doclist_push(kvcal_doclist *l, kvcal_doc d)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        kvcal_doc *p = realloc(l->d, cap * sizeof *p);
        if (!p)
            return kvcal_fail(KVCAL_ERR_NOMEM, "dataset: out of memory for %zu documents",
                              cap);
        l->d = p;
        l->cap = cap;
    }
    l->d[l->n++] = d;
    return KVCAL_OK;
}

kvcal_status kvcal_doclist_keep_buffer(kvcal_doclist *l, char *buf)
{
    char **p = realloc(l->bufs, (l->n_bufs + 1) * sizeof *p);
    if (!p) {
        free(buf);
        return kvcal_fail(KVCAL_ERR_NOMEM, "dataset: out of memory");
    }
    l->bufs = p;
    l->bufs[l->n_bufs++] = buf;
    return KVCAL_OK;
}
