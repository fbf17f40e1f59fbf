/*
 * hist.c: the log-linear latency histogram of valkeytrace.h, for the native module.
 *
 * The bucket index is the shared static inline function, so a histogram filled in a BPF map
 * and one filled here are the same object. Python hands whole numpy arrays to
 * vt_hist_record_array and vt_hist_percentiles: no per-value Python call.
 */
#include <stddef.h>
#include <string.h>

#include "hist.h"

uint64_t vt_hist_bucket_lower(uint32_t index)
{
    uint32_t group, mantissa;
    if (index < VT_HIST_SUB_COUNT)
        return index;
    if (index >= VT_HIST_BUCKETS)
        index = VT_HIST_BUCKETS - 1;
    group = (index - VT_HIST_SUB_COUNT) / VT_HIST_HALF;
    mantissa = (index - VT_HIST_SUB_COUNT) % VT_HIST_HALF + VT_HIST_HALF;
    return (uint64_t)mantissa << (group + 1);
}

/* Exclusive upper bound. The last bucket also holds everything larger: its bound is nominal. */
uint64_t vt_hist_bucket_upper(uint32_t index)
{
    if (index < VT_HIST_SUB_COUNT)
        return (uint64_t)index + 1;
    if (index >= VT_HIST_BUCKETS)
        index = VT_HIST_BUCKETS - 1;
    return vt_hist_bucket_lower(index) + (1ULL << ((index - VT_HIST_SUB_COUNT) / VT_HIST_HALF + 1));
}

void vt_hist_reset(struct vt_hist *h)
{
    memset(h, 0, sizeof(*h));
}

static inline void record_one(struct vt_hist *h, uint64_t v)
{
    if (h->count == 0 || v < h->min_ns)
        h->min_ns = v;
    if (v > h->max_ns)
        h->max_ns = v;
    h->count++;
    h->sum_ns += v;
    h->buckets[vt_hist_bucket_index(v)]++;
}

void vt_hist_record(struct vt_hist *h, uint64_t value_ns)
{
    record_one(h, value_ns);
}

void vt_hist_record_array(struct vt_hist *h, const uint64_t *values_ns, size_t n)
{
    for (size_t i = 0; i < n; i++)
        record_one(h, values_ns[i]);
}

void vt_hist_merge(struct vt_hist *dst, const struct vt_hist *src)
{
    if (src->count == 0)
        return;
    if (dst->count == 0 || src->min_ns < dst->min_ns)
        dst->min_ns = src->min_ns;
    if (src->max_ns > dst->max_ns)
        dst->max_ns = src->max_ns;
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
    for (size_t i = 0; i < VT_HIST_BUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
}

/* Replace the buckets with counts (e.g. read from a BPF map). Moments are estimated from the
 * buckets (midpoints, bounds); callers that know them exactly overwrite them afterwards.
 * Returns -1 when n_buckets does not match this build's layout. */
int vt_hist_set_buckets(struct vt_hist *h, const uint64_t *counts, size_t n_buckets)
{
    int first = -1, last = -1;
    if (n_buckets != VT_HIST_BUCKETS)
        return -1;
    vt_hist_reset(h);
    for (size_t i = 0; i < VT_HIST_BUCKETS; i++) {
        uint64_t c = counts[i];
        if (!c)
            continue;
        if (first < 0)
            first = (int)i;
        last = (int)i;
        h->buckets[i] = c;
        h->count += c;
        h->sum_ns += c * ((vt_hist_bucket_lower(i) + vt_hist_bucket_upper(i) - 1) / 2);
    }
    if (first >= 0) {
        h->min_ns = vt_hist_bucket_lower((uint32_t)first);
        h->max_ns = vt_hist_bucket_upper((uint32_t)last) - 1;
    }
    return 0;
}

/* The value at each percentile (0..100), by the inverted-CDF definition: the smallest recorded
 * value x with at least pct% of the values <= x. Reported as the midpoint of x's bucket,
 * clamped to [min, max]. Returns -1 on an empty histogram or a percentile out of range. */
int vt_hist_percentiles(const struct vt_hist *h, const double *pcts, size_t n, uint64_t *out_ns)
{
    if (h->count == 0)
        return -1;
    for (size_t k = 0; k < n; k++) {
        double p = pcts[k];
        uint64_t rank, seen = 0;
        size_t i;
        if (!(p >= 0.0 && p <= 100.0))
            return -1;
        rank = (uint64_t)((p / 100.0) * (double)h->count);
        if ((double)rank < (p / 100.0) * (double)h->count)
            rank++; /* ceil */
        if (rank == 0)
            rank = 1;
        for (i = 0; i < VT_HIST_BUCKETS - 1; i++) {
            seen += h->buckets[i];
            if (seen >= rank)
                break;
        }
        /* the last bucket is open-ended: its midpoint means nothing, the max does */
        uint64_t v = i == VT_HIST_BUCKETS - 1
                         ? h->max_ns
                         : (vt_hist_bucket_lower((uint32_t)i) + vt_hist_bucket_upper((uint32_t)i) - 1) / 2;
        if (v < h->min_ns)
            v = h->min_ns;
        if (v > h->max_ns)
            v = h->max_ns;
        out_ns[k] = v;
    }
    return 0;
}
