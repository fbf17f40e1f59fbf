/* hist.h: prototypes of hist.c (the histogram layout and bucket index are in valkeytrace.h). */
#ifndef VALKEYTRACE_HIST_H
#define VALKEYTRACE_HIST_H
#include <stddef.h>
#include <stdint.h>
#include "valkeytrace.h"

uint64_t vt_hist_bucket_lower(uint32_t index);
uint64_t vt_hist_bucket_upper(uint32_t index);
void vt_hist_reset(struct vt_hist *h);
void vt_hist_record(struct vt_hist *h, uint64_t value_ns);
void vt_hist_record_array(struct vt_hist *h, const uint64_t *values_ns, size_t n);
void vt_hist_merge(struct vt_hist *dst, const struct vt_hist *src);
int vt_hist_set_buckets(struct vt_hist *h, const uint64_t *counts, size_t n_buckets);
int vt_hist_percentiles(const struct vt_hist *h, const double *pcts, size_t n, uint64_t *out_ns);
#endif
