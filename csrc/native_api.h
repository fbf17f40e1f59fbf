/* The surface of valkeytrace._native, read by csrc/build_ffi.py into ffi.cdef().
 * Plain declarations only (cffi parses this, not a C compiler); the definitions live in
 * valkeytrace.h and hist.c. `...` lets the compiler fill in the real values. */

#define VT_HIST_BUCKETS ...
#define VT_HIST_SUB_COUNT ...
#define VT_HIST_MAX_BITS ...
#define VT_CALL_KINDS ...
#define VT_STATE_KINDS ...

struct vt_hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t min_ns;
    uint64_t max_ns;
    uint64_t buckets[...];
};

struct vt_block_event {
    uint64_t start_ns;
    uint64_t duration_ns;
    uint32_t tid;
    uint16_t cause;
    uint16_t state;
};

uint32_t vt_hist_bucket_index(uint64_t value_ns);
uint64_t vt_hist_bucket_lower(uint32_t index);
uint64_t vt_hist_bucket_upper(uint32_t index);

void vt_hist_reset(struct vt_hist *h);
void vt_hist_record(struct vt_hist *h, uint64_t value_ns);
void vt_hist_record_array(struct vt_hist *h, const uint64_t *values_ns, size_t n);
void vt_hist_merge(struct vt_hist *dst, const struct vt_hist *src);
int vt_hist_set_buckets(struct vt_hist *h, const uint64_t *counts, size_t n_buckets);
int vt_hist_percentiles(const struct vt_hist *h, const double *pcts, size_t n, uint64_t *out_ns);
