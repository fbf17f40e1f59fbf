/* Sanitizer test of the C code valkeytrace runs on data it does not control: the shim region
 * reader (shim_region.c) and the histogram (hist.c). Built with -fsanitize=address,undefined by
 * tests/unit/test_native_sanitized.py; any out-of-bounds access aborts with a report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "shim_region.h"

static unsigned long long rng = 88172645463325252ull;
static unsigned long long next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void)
{
    size_t full = vt_shim_region_size();
    struct vt_shim_thread out;
    int checked = 0;

    /* regions of every awkward size: the reader must refuse, never read past the end */
    size_t sizes[] = {0, 1, sizeof(struct vt_shim_header) - 1, sizeof(struct vt_shim_header),
                      sizeof(struct vt_shim_header) + 5, full - 1, full};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t len = sizes[k];
        unsigned char *buf = malloc(len ? len : 1);
        if (len >= sizeof(struct vt_shim_header)) {
            struct vt_shim_header h = {.magic = VT_SHIM_MAGIC, .version = VT_SHIM_VERSION,
                                       .max_threads = VT_SHIM_MAX_THREADS, .nthreads = 1000000, .pid = 1,
                                       .hist_buckets = VT_HIST_BUCKETS, .thread_size = sizeof(struct vt_shim_thread)};
            memcpy(buf, &h, sizeof(h));
        }
        int n = vt_shim_readable_slots(buf, len);
        if (len < full && n != -1) {
            fprintf(stderr, "accepted a %zu-byte region\n", len);
            return 1;
        }
        for (int i = -2; i < VT_SHIM_MAX_THREADS + 3; i++)
            vt_shim_copy_slot(buf, len, i, &out);
        free(buf);
        checked++;
    }

    /* a full region with random headers and random slot contents */
    unsigned char *region = malloc(full);
    for (int round = 0; round < 2000; round++) {
        vt_shim_region_init(region, full, 0);
        struct vt_shim_header *h = (struct vt_shim_header *)region;
        h->nthreads = (uint32_t)next();
        if (round % 3 == 0)
            h->magic = (uint32_t)next();
        if (round % 5 == 0)
            h->thread_size = next();
        struct vt_shim_thread *slots = (struct vt_shim_thread *)(h + 1);
        int i = (int)(next() % VT_SHIM_MAX_THREADS);
        slots[i].claimed = 1;
        memset(slots[i].name, 'x', sizeof(slots[i].name)); /* no terminator: copy must add one */
        int n = vt_shim_readable_slots(region, full);
        if (n > VT_SHIM_MAX_THREADS) {
            fprintf(stderr, "slot count %d beyond the region\n", n);
            return 1;
        }
        for (int j = -1; j <= VT_SHIM_MAX_THREADS; j++)
            if (vt_shim_copy_slot(region, full, j, &out) == 0 && strlen(out.name) >= sizeof(out.name))
                return 1;
        checked++;
    }
    free(region);

    /* the histogram on extreme values and percentiles */
    struct vt_hist *hist = calloc(1, sizeof(*hist));
    for (int k = 0; k < 100000; k++)
        vt_hist_record(hist, next() >> (next() % 64));
    vt_hist_record(hist, ~0ull);
    vt_hist_record(hist, 0);
    double pcts[] = {0, 0.001, 50, 99.999, 100};
    uint64_t vals[5];
    if (vt_hist_percentiles(hist, pcts, 5, vals) != 0 || vals[4] != ~0ull || vals[0] != 0)
        return 1;
    double bad[] = {-1};
    if (vt_hist_percentiles(hist, bad, 1, vals) != -1)
        return 1;
    for (uint32_t idx = 0; idx < VT_HIST_BUCKETS + 5; idx++)
        if (vt_hist_bucket_lower(idx) > vt_hist_bucket_upper(idx))
            return 1;
    uint64_t *counts = calloc(VT_HIST_BUCKETS, sizeof(uint64_t));
    if (vt_hist_set_buckets(hist, counts, VT_HIST_BUCKETS - 1) != -1)
        return 1;
    free(counts);
    free(hist);
    printf("ok %d regions\n", checked);
    return 0;
}
