/*
 * shim_region.c: valkeytrace's side of the shim's shared-memory region (valkeytrace.h).
 *
 * valkeytrace creates the region (vt_shim_region_init) before launching the server, and reads
 * it while the server runs. Everything read from the region is bounds-checked first: the slot
 * count comes from the server process and is never trusted.
 */
#include <string.h>

#include "shim_region.h"

size_t vt_shim_region_size(void)
{
    return sizeof(struct vt_shim_header) + (size_t)VT_SHIM_MAX_THREADS * sizeof(struct vt_shim_thread);
}

int vt_shim_region_init(void *base, size_t len, uint64_t inject_delay_ns)
{
    struct vt_shim_header *h = (struct vt_shim_header *)base;
    if (!base || len < vt_shim_region_size())
        return -1;
    memset(base, 0, vt_shim_region_size());
    h->magic = VT_SHIM_MAGIC;
    h->version = VT_SHIM_VERSION;
    h->max_threads = VT_SHIM_MAX_THREADS;
    h->hist_buckets = VT_HIST_BUCKETS;
    h->thread_size = sizeof(struct vt_shim_thread);
    h->inject_delay_ns = inject_delay_ns;
    return 0;
}

/* How many slots may be read: -1 when the region is not a valid one of this layout. */
int vt_shim_readable_slots(const void *base, size_t len)
{
    const struct vt_shim_header *h = (const struct vt_shim_header *)base;
    uint32_t n;
    if (!base || len < sizeof(struct vt_shim_header))
        return -1;
    if (h->magic != VT_SHIM_MAGIC || h->version != VT_SHIM_VERSION || h->max_threads != VT_SHIM_MAX_THREADS ||
        h->hist_buckets != VT_HIST_BUCKETS || h->thread_size != sizeof(struct vt_shim_thread))
        return -1;
    if (len < vt_shim_region_size())
        return -1;
    n = __atomic_load_n(&h->nthreads, __ATOMIC_ACQUIRE);
    return (int)(n > VT_SHIM_MAX_THREADS ? VT_SHIM_MAX_THREADS : n);
}

/* Copy slot i (if claimed) into out; -1 when i is not readable. */
int vt_shim_copy_slot(const void *base, size_t len, int i, struct vt_shim_thread *out)
{
    int n = vt_shim_readable_slots(base, len);
    const struct vt_shim_thread *slots = (const struct vt_shim_thread *)((const struct vt_shim_header *)base + 1);
    if (n < 0 || i < 0 || i >= n || !out)
        return -1;
    if (!__atomic_load_n(&slots[i].claimed, __ATOMIC_ACQUIRE))
        return -1;
    memcpy(out, &slots[i], sizeof(*out));
    out->name[sizeof(out->name) - 1] = '\0';
    return 0;
}
