/* shim_region.h: prototypes of shim_region.c. */
#ifndef VALKEYTRACE_SHIM_REGION_H
#define VALKEYTRACE_SHIM_REGION_H
#include <stddef.h>
#include <stdint.h>
#include "valkeytrace.h"

size_t vt_shim_region_size(void);
int vt_shim_region_init(void *base, size_t len, uint64_t inject_delay_ns);
int vt_shim_readable_slots(const void *base, size_t len);
int vt_shim_copy_slot(const void *base, size_t len, int i, struct vt_shim_thread *out);
#endif
