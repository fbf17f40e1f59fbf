/*
 * offload_links.c: the committed offset of each replica link (offload_links.h).
 *
 * Every write the server makes to a replica's link is a mark (the link's byte count after it, the AOF
 * bytes queued before it) in a ring per link; when the AOF is durable past a mark's queued bytes, the
 * link's committed offset moves to its byte count. The stream itself is not touched here (the durable
 * offload holds it or not: --offload-replicas); this only says how much of it is durable on the primary,
 * as a committed offset sent beside the stream would.
 */
#define _GNU_SOURCE
#include "offload_links.h"

#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MARKS 4096 /* a full ring merges into its newest mark: the offset then moves later, never early */

struct link {
    int fd;
    uint64_t sent;
    struct { uint64_t start, queued; } mark[MARKS]; /* a write's first byte, the AOF bytes queued before it */
    uint32_t h, n;
};

static struct vt_replica_link *shared;
static struct link links[VT_REPLICA_LINKS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

void vt_links_attach(struct vt_replica_link *l)
{
    shared = l;
    for (int i = 0; i < VT_REPLICA_LINKS; i++)
        links[i].fd = -1;
}

/* the replica's release thread sleeps on s->wake (a futex in the shared file): woken when committed moves */
static void wake_replica(struct vt_replica_link *s)
{
    __atomic_add_fetch(&s->wake, 1, __ATOMIC_ACQ_REL);
    syscall(SYS_futex, &s->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int peer_port(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof(a);
    if (getpeername(fd, (struct sockaddr *)&a, &len) != 0)
        return 0;
    if (a.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&a)->sin_port);
    if (a.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    return 0;
}

static int slot_of(int fd)
{
    int free_ = -1;
    for (int i = 0; i < VT_REPLICA_LINKS; i++) {
        if (links[i].fd == fd)
            return i;
        if (links[i].fd < 0 && free_ < 0)
            free_ = i;
    }
    if (free_ < 0)
        return -1; /* more replicas than entries: that link's offset is not published */
    links[free_].fd = fd, links[free_].sent = 0, links[free_].h = links[free_].n = 0;
    __atomic_store_n(&shared[free_].sent, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&shared[free_].committed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&shared[free_].port, (uint32_t)peer_port(fd), __ATOMIC_RELEASE);
    wake_replica(&shared[free_]);
    return free_;
}

/* committed: every byte before the first write still waiting for the AOF (all of them when none waits) */
static void settle_locked(struct link *l, struct vt_replica_link *s, uint64_t durable)
{
    while (l->n && l->mark[l->h].queued <= durable)
        l->h = (l->h + 1) % MARKS, l->n--;
    uint64_t to = l->n ? l->mark[l->h].start : l->sent;
    if (__atomic_exchange_n(&s->committed, to, __ATOMIC_ACQ_REL) != to)
        wake_replica(s);
}

void vt_links_wrote(int fd, size_t n, uint64_t queued, uint64_t durable)
{
    if (!shared)
        return;
    pthread_mutex_lock(&mu);
    int i = slot_of(fd);
    if (i >= 0) {
        struct link *l = &links[i];
        if (queued > durable && l->n == MARKS) /* full: the newest mark waits for this one's AOF bytes too */
            l->mark[(l->h + l->n - 1) % MARKS].queued = queued;
        else if (queued > durable)
            l->mark[(l->h + l->n) % MARKS].start = l->sent, l->mark[(l->h + l->n) % MARKS].queued = queued, l->n++;
        l->sent += n;
        __atomic_store_n(&shared[i].sent, l->sent, __ATOMIC_RELEASE);
        settle_locked(l, &shared[i], durable);
    }
    pthread_mutex_unlock(&mu);
}

void vt_links_settle(uint64_t durable)
{
    if (!shared)
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < VT_REPLICA_LINKS; i++)
        if (links[i].fd >= 0)
            settle_locked(&links[i], &shared[i], durable);
    pthread_mutex_unlock(&mu);
}

void vt_links_closed(int fd)
{
    if (!shared)
        return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < VT_REPLICA_LINKS; i++) {
        if (links[i].fd == fd) {
            links[i].fd = -1;
            __atomic_store_n(&shared[i].port, 0, __ATOMIC_RELEASE);
            wake_replica(&shared[i]);
        }
    }
    pthread_mutex_unlock(&mu);
}
