/*
 * vt_grow.h: the growing arrays both the open-loop client (vt_load.c, vt_arrivals.c) and the shim's
 * offload (offload_req.c) keep: one definition, one convention (0, or -1 without memory).
 */
#ifndef VT_GROW_H
#define VT_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* *p (of *cap elements of size bytes) holds at least need: 0, or -1 without memory (*p kept) */
static inline int vt_grow(void **p, uint32_t *cap, size_t size, uint32_t need)
{
    if (need <= *cap)
        return 0;
    uint32_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, (size_t)n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

#endif
