/*
 * offload_links.c: the committed offset of each replica link (offload_links.h).
 *
 * Every write the server makes to a replica's link is a mark (the link's byte count after it, the AOF
 * bytes queued before it) in a ring per link; when the AOF is durable past a mark's queued bytes, the
 * link's committed offset moves to its byte count. The stream itself is not touched here (the durable
 * offload holds it or not: --offload-replicas); this only says how much of it is durable on the primary,
 * as a committed offset sent beside the stream would. A mark's AOF bytes are known at the end of the event-loop
 * iteration its write was made in (offload_links.h): until then the newest mark waits (it and what follows it);
 * under --offload-replicas committed the chunks the durable offload holds for the link wait alike.
 */
#define _GNU_SOURCE
#include "offload_links.h"

#include "offload_conn_int.h"

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
    int loop; /* its newest mark waits for the loop's end */
};

static struct vt_replica_link *shared;
static struct link links[VT_REPLICA_LINKS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int loop_waits; /* atomic: a link's newest mark or a connection's chunk waits for the loop's end (set after) */
static struct conn *loop_conns;                         /* connections holding chunks that wait for it (loop_mu) */
static pthread_mutex_t loop_mu = PTHREAD_MUTEX_INITIALIZER;

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
    links[free_].fd = fd, links[free_].sent = 0, links[free_].h = links[free_].n = 0, links[free_].loop = 0;
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

void vt_links_wrote(int fd, size_t n, uint64_t durable)
{
    if (!shared)
        return;
    pthread_mutex_lock(&mu);
    int i = slot_of(fd);
    if (i >= 0) {
        struct link *l = &links[i];
        if (!l->loop && l->n < MARKS) /* (one mark a loop: what follows it in the loop needs the same) */
            l->mark[(l->h + l->n) % MARKS].start = l->sent, l->n++;
        if (!l->loop) /* its AOF bytes: known at the loop's end (a full ring: the newest mark waits for them too) */
            l->mark[(l->h + l->n - 1) % MARKS].queued = VT_NEED_LOOP_END;
        l->loop = 1;
        __atomic_store_n(&loop_waits, 1, __ATOMIC_RELEASE);
        l->sent += n;
        __atomic_store_n(&shared[i].sent, l->sent, __ATOMIC_RELEASE);
        settle_locked(l, &shared[i], durable);
    }
    pthread_mutex_unlock(&mu);
}

void vt_links_hold(struct conn *c)
{
    pthread_mutex_lock(&loop_mu);
    if (!c->loop_listed)
        c->loop_next = loop_conns, loop_conns = c, c->loop_listed = 1;
    pthread_mutex_unlock(&loop_mu);
    __atomic_store_n(&loop_waits, 1, __ATOMIC_RELEASE); /* after the list: a loop's end that cleared it sees c */
}

void vt_links_loop_end(uint64_t queued)
{
    if (!__atomic_load_n(&loop_waits, __ATOMIC_ACQUIRE))
        return;
    uint64_t durable = vt_off_durable();
    pthread_mutex_lock(&mu);
    __atomic_store_n(&loop_waits, 0, __ATOMIC_RELEASE);
    for (int i = 0; shared && i < VT_REPLICA_LINKS; i++) {
        struct link *l = &links[i];
        if (l->fd >= 0 && l->loop && l->n)
            l->mark[(l->h + l->n - 1) % MARKS].queued = queued;
        l->loop = 0;
        if (l->fd >= 0)
            settle_locked(l, &shared[i], durable);
    }
    pthread_mutex_unlock(&mu);
    pthread_mutex_lock(&loop_mu);
    struct conn *list = loop_conns;
    loop_conns = NULL;
    pthread_mutex_unlock(&loop_mu);
    for (struct conn *c = list, *next; c; c = next) {
        pthread_mutex_lock(&c->mu); /* (lock order: a connection's, then loop_mu, as vt_links_hold) */
        pthread_mutex_lock(&loop_mu);
        next = c->loop_next, c->loop_listed = 0; /* listed again only from here on, into the next list */
        pthread_mutex_unlock(&loop_mu);
        for (struct chunk *ch = c->held; ch; ch = ch->next)
            ch->need = ch->need == VT_NEED_LOOP_END ? queued : ch->need;
        c->held_need = c->held_need == VT_NEED_LOOP_END ? queued : c->held_need;
        int held = c->held != NULL;
        pthread_mutex_unlock(&c->mu);
        if (held)
            vt_off_register_held(&c->node, queued); /* the offload thread delivers it once durable */
    }
}

void vt_offload_loop_end(void)
{
    if (__atomic_load_n(&loop_waits, __ATOMIC_ACQUIRE) && vt_off_on_main_thread())
        vt_links_loop_end(vt_off_queued());
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
