/*
 * offload_links.h: each replica link's committed offset under the durable virtual offload
 * (csrc/offload_links.c), published in the shared file's links[] (offload_layout.h).
 */
#ifndef VT_OFFLOAD_LINKS_H
#define VT_OFFLOAD_LINKS_H

#include <stddef.h>
#include <stdint.h>

#include "offload_layout.h"

void vt_links_attach(struct vt_replica_link *links);
/* the server wrote n stream bytes to replica link fd, with `queued` AOF bytes queued before them */
void vt_links_wrote(int fd, size_t n, uint64_t queued, uint64_t durable);
/* the AOF is durable up to `durable`: the links' committed offsets follow */
void vt_links_settle(uint64_t durable);
void vt_links_closed(int fd);

#endif
