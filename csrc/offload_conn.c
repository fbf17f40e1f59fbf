/*
 * offload_conn.c: the virtual offload's client connections (offload_conn.h).
 *
 * What is held, decided as the server decides it (valkey#3381's reply blocking):
 *   - a write (the server's table flags it write, or a key spec says it may write: EVAL, FCALL),
 *     an unknown command, WAIT/WAITAOF, EXEC of a transaction with a write: the reply needs every
 *     AOF byte queued when it is framed (the server flushes the AOF before it writes any reply);
 *   - a read: the key table (vt_cmds.h) for each of its arguments: a key with a write parsed and
 *     not answered needs everything queued now, else what its last answered write needed;
 *   - a keyspace-wide read (KEYS, SCAN, DBSIZE) waits for every write.
 * The witness (early_replies) never uses that decision: a reply is early when one of its
 * request's arguments is the first key of an AOF command not yet durable when the reply leaves.
 */
#define _GNU_SOURCE
#include "offload_conn.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "offload.h"
#include "offload_bound.h"
#include "offload_conn_int.h"
#include "offload_links.h"

#define NONE ((size_t)-1)

static struct conn *conns[MAX_FD];

static struct conn *conn_of(int fd) { return fd >= 0 && fd < MAX_FD ? __atomic_load_n(&conns[fd], __ATOMIC_ACQUIRE) : NULL; }

struct conn *vt_conn_get(int fd) { return conn_of(fd); }

int vt_conn_is_client(int fd)
{
    struct conn *c = conn_of(fd);
    return c && __atomic_load_n(&c->active, __ATOMIC_ACQUIRE);
}

/* what the reply to e (hashes from hv[at]) needs durable; e NULL: a reply no command explains */
static uint64_t need_of(const struct conn *c, const struct entry *e, uint32_t at, uint64_t queued)
{
    uint64_t n = 0;
    if (!e || e->kind == E_WRITE)
        return queued;
    if (e->kind == E_WIDE_READ)
        return vt_wide_read_need(queued);
    if (e->kind != E_READ)
        return 0;
    n = vt_wide_need(queued);
    for (uint32_t k = at; k < at + e->nh; k++) {
        if (c->hv[k] & H_READ) {
            uint64_t m = vt_keys_need(c->hv[k], queued);
            n = m > n ? m : n;
        }
    }
    return n;
}

/* the witness: the latest AOF position among its arguments' keys (an AOF command's first key),
 * of the commands queued before the reply was framed (queued): a later one is not what it answers */
static uint64_t wneed_of(const struct conn *c, const struct entry *e, uint32_t at, uint64_t queued)
{
    uint64_t w = 0;
    if (!e)
        return queued;
    for (uint32_t k = at; k < at + e->nh; k++) {
        if (c->hv[k] & H_WIT) {
            uint64_t m = vt_wit_get(c->hv[k] & ~H_FLAGS);
            w = m > w && m <= queued ? m : w;
        }
    }
    return w;
}

struct scan {
    size_t base; /* first: the framing helper sets it per segment */
    struct conn *c;
    uint32_t qi, hi;
    uint64_t queued, durable;
    size_t hold_from;
};

static void scan_start(void *ctx, size_t off)
{
    struct scan *s = ctx;
    const struct entry *e = s->qi < s->c->qt ? &s->c->q[s->qi] : NULL;
    if (s->hold_from == NONE && need_of(s->c, e, s->hi, s->queued) > s->durable)
        s->hold_from = s->base + off;
    if (e) {
        s->hi += e->nh;
        s->qi++;
    }
}

struct commit {
    size_t base;
    struct conn *c;
    uint64_t queued, durable;
    size_t hold_from; /* replies starting here or after are held into ch */
    struct chunk *ch;
};

static void commit_start(void *ctx, size_t off)
{
    struct commit *m = ctx;
    struct conn *c = m->c;
    const struct entry *e = c->qh < c->qt ? &c->q[c->qh] : NULL;
    uint64_t need = need_of(c, e, c->hh, m->queued), wneed = wneed_of(c, e, c->hh, m->queued);
    int kind = e ? e->kind : E_WRITE;
    vt_stat_add(&vt_off.stats->replies, 1);
    if (e) { /* the writes it answers are framed: their keys need what is queued now */
        for (uint32_t k = c->hh; k < c->hh + e->nh; k++)
            if (c->hv[k] & (H_PEND | H_COMMIT))
                vt_keys_commit(c->hv[k], m->queued, (c->hv[k] & H_PEND) != 0, m->durable);
        for (uint32_t k = 0; k < e->nwide; k++)
            vt_wide_commit(m->queued, 1);
        c->hh += e->nh;
        c->qh++;
        vt_stat_add(&vt_off.stats->pending_now, (uint64_t)-1);
        if (e->blocking)
            vt_bound_uncounted(-1);
    }
    if (m->base + off < m->hold_from) { /* leaves now */
        vt_stat_add(&vt_off.stats->witness_checked, 1);
        if (wneed > m->durable)
            vt_stat_add(&vt_off.stats->early_replies, 1);
    } else if (m->ch) {
        struct chunk *ch = m->ch;
        ch->replies++;
        ch->waiting += need > m->durable;
        ch->writes += kind == E_WRITE;
        ch->reads += (kind == E_READ || kind == E_WIDE_READ) && need > m->durable;
        ch->need = need > ch->need ? need : ch->need;
        ch->wneed = wneed > ch->wneed ? wneed : ch->wneed;
        ch->suspects += wneed > need;
    }
    if (!e)
        vt_conn_unsync(c); /* more replies than commands: the two no longer match */
}

/* frame bytes [from, to) of iov with f, calling cb at each reply start (ctx begins with a base) */
static int frame(struct vt_reply_framer *f, const struct iovec *iov, int iovcnt, size_t from, size_t to,
                 void (*cb)(void *, size_t), void *ctx)
{
    size_t pos = 0;
    for (int i = 0; i < iovcnt && pos < to; i++) {
        size_t a = pos, b = pos + iov[i].iov_len;
        pos = b;
        if (b <= from)
            continue;
        a = a < from ? from : a;
        b = b > to ? to : b;
        *(size_t *)ctx = a;
        if (vt_reply_feed(f, (const char *)iov[i].iov_base + (a - (pos - iov[i].iov_len)), b - a, cb, ctx) < 0)
            return -1;
    }
    return 0;
}

static void commit(struct conn *c, const struct iovec *iov, int iovcnt, size_t from, size_t to, size_t hold_from,
                   struct chunk *ch, uint64_t queued, uint64_t durable)
{
    struct commit m = {0, c, queued, durable, hold_from, ch};
    if (!c->unsynced && frame(&c->fr, iov, iovcnt, from, to, commit_start, &m) < 0)
        vt_conn_unsync(c);
}

/* the first `want` bytes of iov (at most 64 segments of them: a short write is legal) */
static ssize_t write_prefix(vt_writev_fn real, int fd, const struct iovec *iov, int iovcnt, size_t want)
{
    struct iovec v[64];
    int n = 0;
    for (size_t got = 0; n < iovcnt && n < 64 && got < want; n++) {
        v[n] = iov[n];
        if (got + v[n].iov_len > want)
            v[n].iov_len = want - got;
        got += v[n].iov_len;
    }
    return real(fd, v, n);
}

static void drop_locked(struct conn *c)
{
    while (c->held) {
        struct chunk *ch = c->held;
        c->held = ch->next;
        vt_stat_add(&vt_off.stats->dropped_replies, ch->replies ? ch->replies : 1);
        vt_off_held_add(-(int64_t)ch->waiting, -(int64_t)(ch->replies - ch->waiting), -(int64_t)(ch->len - ch->off));
        free(ch);
    }
    c->held_tail = NULL;
    c->held_n = 0, c->held_need = 0, c->held_bytes = 0, c->soft_since = 0;
}

/* Held replies count against the client's output buffer as valkey counts its own (the server wrote
 * them, so they left its buffer): over its client-output-buffer-limit (the hard limit, or the soft
 * one for its seconds), the client is closed as valkey closes it; what it held is dropped. 1: closed. */
static int over_limit_locked(struct conn *c)
{
    const struct vt_obuf_limit *l = !vt_off.control ? NULL : c->replica ? &vt_off.control->obuf_replica
                                                                       : &vt_off.control->obuf_normal;
    uint64_t now = vt_now_ns();
    int over = 0;
    if (!l)
        return 0;
    if (l->hard_bytes && c->held_bytes >= l->hard_bytes) {
        over = 1;
    } else if (l->soft_bytes && c->held_bytes >= l->soft_bytes) {
        if (!c->soft_since)
            c->soft_since = now;
        else if (now - c->soft_since >= l->soft_seconds * 1000000000ull)
            over = 1;
    } else {
        c->soft_since = 0;
    }
    if (!over)
        return 0;
    char msg[300];
    snprintf(msg, sizeof(msg), "valkeytrace virtual offload: client fd=%d holds %llu bytes of replies (not yet durable, "
             "or not read), over its client-output-buffer-limit: closed, as the server closes such a client", c->fd,
             (unsigned long long)c->held_bytes);
    drop_locked(c);
    shutdown(c->fd, SHUT_RDWR); /* the server meets it at its next read or write and frees the client */
    __atomic_store_n(&c->active, 0, __ATOMIC_RELEASE);
    vt_stat_add(&vt_off.stats->obuf_closed, 1);
    vt_off_log(msg);
    return 1;
}

static int stream_committed(void) { return vt_off.control && vt_off.control->replicas == VT_REPLICAS_COMMITTED; }

/* n stream bytes the kernel took or the shim holds (sent in order): counted once, as the replica reads them (a
 * short write's rest comes again from the server); the AOF bytes queued with them make its committed offset */
static void stream_took(struct conn *c, size_t n, uint64_t queued, uint64_t durable)
{
    if (!c->replica || !n)
        return;
    vt_stat_add(&vt_off.stats->stream_bytes, n);
    if (vt_off.mode == VT_OFFLOAD_DURABLE && queued > durable && !stream_committed())
        vt_stat_add(&vt_off.stats->stream_dirty_bytes, n);
    vt_links_wrote(c->fd, n, durable);
}

int vt_conn_take(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret, vt_writev_fn real)
{
    struct conn *c = conn_of(fd);
    size_t total = 0;
    if (!c || !__atomic_load_n(&c->active, __ATOMIC_ACQUIRE))
        return 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (!total)
        return 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        uint64_t durable = vt_off_durable(), queued = vt_off_queued();
        size_t hold_from = NONE, sent = 0;
        /* committed: a link's stream is held whole, for the AOF bytes queued by the loop's end (offload_links.h) */
        int loop = c->replica && c->unsynced && vt_off.mode == VT_OFFLOAD_DURABLE && stream_committed();
        if (!c->active) {
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
        if (c->held_n) {
            hold_from = 0; /* behind what it holds already */
        } else if (vt_off.mode != VT_OFFLOAD_DURABLE) {
            hold_from = NONE; /* early-ack: nothing is held, the witness still looks */
        } else if (c->unsynced) { /* a replica's link: its stream held only when told (committed) */
            hold_from = loop || (!c->replica && queued > durable) ? 0 : NONE;
        } else {
            struct scan s = {0, c, c->qh, c->hh, queued, durable, NONE};
            struct vt_reply_framer f = c->fr;
            if (frame(&f, iov, iovcnt, 0, total, scan_start, &s) < 0)
                s.hold_from = s.hold_from == NONE ? 0 : s.hold_from;
            hold_from = s.hold_from;
        }
        if (hold_from != 0) {
            size_t want = hold_from == NONE ? total : hold_from;
            ssize_t n = want == total ? real(fd, iov, iovcnt) : write_prefix(real, fd, iov, iovcnt, want);
            int saved = errno;
            if (n > 0)
                commit(c, iov, iovcnt, 0, (size_t)n, NONE, NULL, queued, durable);
            if (n < 0 || (size_t)n < want || hold_from == NONE) {
                stream_took(c, n > 0 ? (size_t)n : 0, queued, durable);
                pthread_mutex_unlock(&c->mu);
                *ret = n, errno = saved;
                return 1;
            }
            sent = (size_t)n;
        }
        struct chunk *ch = malloc(sizeof(struct chunk) + (total - sent));
        if (!ch && (sent || loop)) { /* no memory to hold the rest: a short write, or one that would block */
            stream_took(c, sent, queued, durable);
            pthread_mutex_unlock(&c->mu);
            *ret = sent ? (ssize_t)sent : -1, errno = EAGAIN; /* (the server sends the rest again) */
            return 1;
        }
        if (!ch) { /* no memory to hold it: ask for a job, wait until nothing is held and everything is durable */
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_lock(&vt_off.mu);
            vt_off.sync_wanted = vt_off.sync_wanted > queued ? vt_off.sync_wanted : queued;
            vt_off.release_wanted = 1;
            vt_off_kick_locked();
            while (!vt_off_failed() && !__atomic_load_n(&vt_off.thread_done, __ATOMIC_ACQUIRE) &&
                   (vt_off_durable() < queued || __atomic_load_n(&c->held_n, __ATOMIC_ACQUIRE)))
                vt_off_wait_done_locked(10);
            pthread_mutex_unlock(&vt_off.mu);
            pthread_mutex_lock(&c->mu);
            if (vt_off_failed()) {
                pthread_mutex_unlock(&c->mu);
                *ret = -1, errno = EIO;
                return 1;
            }
            continue;
        }
        memset(ch, 0, sizeof(*ch));
        ch->len = total - sent;
        for (size_t pos = 0, i = 0; i < (size_t)iovcnt; pos += iov[i].iov_len, i++) {
            size_t a = pos < sent ? sent : pos, b = pos + iov[i].iov_len;
            if (b > a)
                memcpy(ch->data + (a - sent), (const char *)iov[i].iov_base + (a - pos), b - a);
        }
        commit(c, iov, iovcnt, sent, total, sent, ch, queued, durable);
        if (c->unsynced || !ch->replies)
            ch->need = loop ? VT_NEED_LOOP_END : ch->need > queued ? ch->need : queued;
        if (loop)
            vt_links_hold(c);
        ch->need = ch->need > c->held_need ? ch->need : c->held_need;
        c->held_need = ch->need;
        ch->held_ns = vt_now_ns();
        ch->jobs_at_hold = __atomic_load_n(&vt_off.stats->jobs, __ATOMIC_RELAXED);
        *(c->held_tail ? &c->held_tail->next : &c->held) = ch;
        c->held_tail = ch;
        __atomic_store_n(&c->held_n, c->held_n + 1, __ATOMIC_RELEASE);
        c->held_bytes += ch->len;
        vt_off_held_add(ch->waiting, (int64_t)(ch->replies - ch->waiting), (int64_t)ch->len);
        vt_stat_add(&vt_off.stats->held_replies, ch->replies);
        vt_stat_add(&vt_off.stats->held_write_replies, ch->writes);
        vt_stat_add(&vt_off.stats->held_read_replies, ch->reads);
        vt_stat_add(&vt_off.stats->held_bytes, ch->len);
        if (c->replica)
            vt_stat_add(&vt_off.stats->stream_held_bytes, ch->len);
        stream_took(c, total, queued, durable); /* the kernel took `sent`, the rest is held: all of it is taken */
        uint64_t need = ch->need;
        if (over_limit_locked(c)) { /* closed: the server's write fails, as on a client it dropped */
            pthread_mutex_unlock(&c->mu);
            *ret = -1, errno = EPIPE;
            return 1;
        }
        pthread_mutex_unlock(&c->mu);
        vt_off_register_held(&c->node, need);
        *ret = (ssize_t)total;
        return 1;
    }
}

int vt_conn_deliver(struct vt_held_node *node, int *fd)
{
    struct conn *c = (struct conn *)((char *)node - offsetof(struct conn, node));
    int status = 0;
    pthread_mutex_lock(&c->mu);
    *fd = c->fd;
    while (c->held && !vt_off_failed()) {
        struct chunk *ch = c->held;
        uint64_t durable = vt_off_durable();
        if (ch->need > durable) {
            status = 1;
            break;
        }
        ssize_t n = vt_off.raw_write(c->fd, ch->data + ch->off, ch->len - ch->off);
        if (n > 0) {
            ch->off += (size_t)n;
            vt_off_held_add(0, 0, -(int64_t)n);
            c->held_bytes -= (uint64_t)n < c->held_bytes ? (uint64_t)n : c->held_bytes;
            if (ch->off < ch->len)
                continue;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            vt_stat_add(&vt_off.stats->blocked_deliveries, 1);
            status = 2; /* the rest stays, in order, for when the socket takes it */
            break;
        } else {
            drop_locked(c); /* the peer is gone: the server meets the error at its next read or write */
            break;
        }
        struct vt_offload_stats *st = vt_off.stats;
        uint64_t waited = __atomic_load_n(&st->jobs, __ATOMIC_RELAXED) - ch->jobs_at_hold, now = vt_now_ns();
        vt_stat_add(&st->released_replies, ch->replies);
        vt_stat_add(&st->jobs_waited_sum, waited * ch->replies);
        vt_stat_add(&st->jobs_waited[waited < VT_OFFLOAD_WAITED_MAX ? waited : VT_OFFLOAD_WAITED_MAX - 1], ch->replies);
        vt_off_hist_add(&st->hold_ns, now - ch->held_ns, ch->replies);
        vt_off_hist_add(&st->hold_read_ns, now - ch->held_ns, ch->reads);
        vt_stat_add(&st->witness_checked, ch->replies);
        if (ch->wneed > durable)
            vt_stat_add(&st->early_replies, ch->suspects);
        c->held = ch->next;
        if (!c->held)
            c->held_tail = NULL, c->held_need = 0, c->held_bytes = 0;
        __atomic_store_n(&c->held_n, c->held_n - 1, __ATOMIC_RELEASE);
        vt_off_held_add(-(int64_t)ch->waiting, -(int64_t)(ch->replies - ch->waiting), 0);
        free(ch);
    }
    pthread_mutex_unlock(&c->mu);
    return status;
}

void vt_conn_drop(struct vt_held_node *node)
{
    struct conn *c = (struct conn *)((char *)node - offsetof(struct conn, node));
    pthread_mutex_lock(&c->mu);
    drop_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void reset_locked(struct conn *c)
{
    vt_conn_settle_all(c, 0); /* its commands may have run: their keys need what is queued now */
    drop_locked(c);
    vt_req_init(&c->rp, 1);
    vt_reply_init(&c->fr);
    c->unsynced = 0;
    c->replica = 0;
    c->in_multi = 0;
}

void vt_conn_accepted(int fd)
{
    struct conn *c = conn_of(fd), *expected = NULL;
    if (fd < 0 || fd >= MAX_FD)
        return;
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c) { /* cannot follow it: better no client than one acknowledged early */
            shutdown(fd, SHUT_RDWR);
            return;
        }
        pthread_mutex_init(&c->mu, NULL);
        if (!__atomic_compare_exchange_n(&conns[fd], &expected, c, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            pthread_mutex_destroy(&c->mu);
            free(c);
            c = expected;
        }
    }
    pthread_mutex_lock(&c->mu);
    reset_locked(c);
    c->fd = fd;
    __atomic_store_n(&c->active, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
}

void vt_offload_read(int fd, void *buf, ssize_t n)
{
    struct conn *c = conn_of(fd);
    if (!vt_off.mode || n <= 0 || !c || !__atomic_load_n(&c->active, __ATOMIC_ACQUIRE))
        return;
    vt_stat_add(&vt_off.read_bytes, (uint64_t)n);
    pthread_mutex_lock(&c->mu);
    c->rbuf = buf; /* a write rejected over the bound is renamed in it (offload_req.c) */
    if (c->active)
        vt_req_feed(&c->rp, buf, (size_t)n, &vt_conn_req_cb, c);
    c->rbuf = NULL;
    pthread_mutex_unlock(&c->mu);
}

void vt_offload_accepted(int fd)
{
    if (vt_off.mode && fd >= 0)
        vt_conn_accepted(fd);
}

int vt_offload_client(int fd)
{
    struct conn *c = conn_of(fd);
    return vt_off.mode && c && __atomic_load_n(&c->active, __ATOMIC_ACQUIRE) && !__atomic_load_n(&c->replica, __ATOMIC_RELAXED);
}

int vt_conn_close(int fd)
{
    struct conn *c = conn_of(fd);
    if (!c || !__atomic_load_n(&c->active, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&c->mu);
    /* the server frees the client: what it holds goes with it, at once, as valkey frees a closed client's
     * reply buffers (#3381 alike). The writes stay queued and become durable; no reply was sent early. The
     * main thread never waits here for a job (a stalled disk would stall it; drop_locked counts them in
     * dropped_replies); the offload thread writes a
     * held reply only under c->mu, so it meets an empty list, never the fd number's next owner */
    if (c->replica)
        vt_links_closed(fd);
    reset_locked(c);
    __atomic_store_n(&c->active, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
    return 1;
}
