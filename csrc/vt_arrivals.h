/*
 * vt_arrivals.h: the open-loop client's clocks, random numbers, schedule and growing arrays (csrc/vt_arrivals.c),
 * apart from its connections (vt_load.c).
 */
#ifndef VT_ARRIVALS_H
#define VT_ARRIVALS_H

#include <stddef.h>
#include <stdint.h>

#include "vt_grow.h" /* vt_grow: the growing arrays */

uint64_t vt_mono_ns(void); /* CLOCK_MONOTONIC: only rises (the schedule, and a SET's sequence, vt_load.h) */
uint64_t vt_rand(uint64_t *state); /* xorshift64*: state never 0 */
/* n due moments over [from, from + span): evenly spaced (uniform), or Poisson spacings scaled so that
 * the n-th falls inside the span (a Poisson process given its count: the count is the rate's);
 * malloc'd, NULL without memory */
uint64_t *vt_arrivals(uint64_t *rng, int uniform, uint64_t from, uint64_t span, uint64_t n);

/* v added at the tail of the ring *q (head *h, *n held, *cap room; doubled when full): 0, or -1 without memory */
int vt_ring_push(uint64_t **q, uint32_t *h, uint32_t *n, uint32_t *cap, uint64_t v);

/* A RESP reply as it comes: a simple line (+, -, :), or a bulk ($N then N bytes and CRLF, or $-1): enough for
 * GET and SET. vt_reply_next reads buf[*at..n) up to the end of a reply (1: kind and num say which; a bulk's
 * data went to keep(ctx, bytes, len) as it came, when given) or to the buffer's end (0). */
struct vt_reply {
    int state; /* 0 a reply's start, 1 in its line, 2 in a bulk's data */
    char kind;
    int64_t num, bulk;
};
int vt_reply_next(struct vt_reply *r, const char *buf, size_t n, size_t *at, void (*keep)(void *, const char *, size_t),
                  void *ctx);

#endif
