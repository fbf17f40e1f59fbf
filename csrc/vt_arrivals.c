/*
 * vt_arrivals.c: the open-loop client's clocks, random numbers and schedule (vt_arrivals.h).
 */
#define _GNU_SOURCE
#include "vt_arrivals.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t vt_mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

uint64_t vt_rand(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t *vt_arrivals(uint64_t *rng, int uniform, uint64_t from, uint64_t span, uint64_t n)
{
    uint64_t *t = malloc((n ? n : 1) * sizeof(uint64_t));
    double *g = malloc((n + 1) * sizeof(double)), sum = 0;
    if (!t || !g) {
        free(t);
        free(g);
        return NULL;
    }
    for (uint64_t i = 0; i <= n; i++) {
        double u = (double)((vt_rand(rng) >> 11) + 1) * (1.0 / 9007199254740993.0); /* (0, 1] */
        g[i] = uniform ? 1.0 : -log(u);
        sum += g[i];
    }
    double acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        acc += g[i];
        t[i] = from + (uint64_t)((double)span * acc / sum);
    }
    free(g);
    return t;
}

int vt_ring_push(uint64_t **q, uint32_t *h, uint32_t *n, uint32_t *cap, uint64_t v)
{
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 1024;
        uint64_t *r = malloc((size_t)c * sizeof(uint64_t));
        if (!r)
            return -1;
        for (uint32_t i = 0; i < *n; i++)
            r[i] = (*q)[(*h + i) % *cap];
        free(*q);
        *q = r, *cap = c, *h = 0;
    }
    (*q)[(*h + (*n)++) % *cap] = v;
    return 0;
}

int vt_reply_next(struct vt_reply *r, const char *buf, size_t n, size_t *at, void (*keep)(void *, const char *, size_t),
                  void *ctx)
{
    for (size_t i = *at; i < n;) {
        if (r->state == 2) {
            size_t take = (size_t)r->bulk < n - i ? (size_t)r->bulk : n - i;
            if (keep)
                keep(ctx, buf + i, take);
            r->bulk -= (int64_t)take;
            i += take;
            if (!r->bulk) {
                r->state = 0;
                *at = i;
                return 1;
            }
            continue;
        }
        char ch = buf[i++];
        if (r->state == 0) {
            r->kind = ch, r->num = 0, r->state = 1;
        } else if (ch == '\n') {
            if (r->kind == '$' && r->num >= 0) {
                r->bulk = r->num + 2;
                r->state = 2;
            } else {
                r->state = 0;
                *at = i;
                return 1;
            }
        } else if (r->kind == '$' && ch == '-') {
            r->num = -1;
        } else if (r->kind == '$' && ch >= '0' && ch <= '9' && r->num >= 0) {
            r->num = r->num * 10 + (ch - '0');
        }
    }
    *at = n;
    return 0;
}
