/*
 * replica_hold.c: a replica holds reads of keys written past its primary's committed offset
 * (replica_hold.h).
 */
#define _GNU_SOURCE
#include "replica_hold.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stddef.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "offload_layout.h"
#include "shim_io.h"
#include "vt_cmds.h"
#include "vt_resp.h"

#define SLOTS (1u << 16) /* key slots (a collision only makes a read wait longer) */
#define KEYS_MAX 16      /* keys a connection's pending commands name; more: it waits for the whole stream read */
#define SAFETY_MS 1000   /* the release thread sleeps on the link's wake word; it looks again at least this often */
#define BLOCKED_MS 1     /* while a client's socket is full: it waits for the socket as long, then looks again */
#define MARK 40          /* a diskless full sync's end-of-payload mark ($EOF:<40 bytes>) */

struct keyset {
    struct vt_cmdinfo ci;
    int known, wide, n;
    int64_t argc;
    uint64_t h[KEYS_MAX];
};

struct chunk {
    struct chunk *next;
    uint64_t need;
    size_t len, off;
    char data[];
};

struct rconn {
    pthread_mutex_t mu;
    int active, listed;
    struct vt_req_parser p;
    struct keyset cur;     /* the command being parsed; its keys join `pending` at its end */
    uint64_t pending[KEYS_MAX];
    int npending, wide;    /* keys of the commands read since the connection's last reply */
    struct chunk *head, *tail;
};

static struct vt_offload_shared *primary;
static struct rconn *conns[VT_MAX_FD];
static uint64_t slot_off[SLOTS];   /* link offset of the last write to a key slot */
static uint64_t wide_off;          /* of the last keyspace-wide write (FLUSHALL, a command not in the table) */
static int link_fd = -1, link_slot = -1;
static uint32_t link_port;
static uint64_t link_read, feed_end;
static pthread_mutex_t link_mu = PTHREAD_MUTEX_INITIALIZER;
static int lstate;                 /* 0 the PSYNC reply, 1 the payload's header, 2 its bytes, 3 up to its mark, 4 the stream */
static char line[128], mark[MARK], tailbuf[MARK];
static size_t line_n, tail_n;
static int64_t payload_left;
static struct vt_req_parser lp;
static struct keyset lk;
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cv = PTHREAD_COND_INITIALIZER;
static int *held_fds, held_n, held_cap, enabled; /* the connections holding replies (grown as needed) */

static inline uint32_t slot(uint64_t h) { return (uint32_t)(h >> 4) & (SLOTS - 1); }

static void amax(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

/* what the primary says is durable of this link's stream; UINT64_MAX when there is nothing to wait for
 * (no link, or the primary does not publish it: it ended, or the link is not one it follows) */
static uint64_t committed(void)
{
    if (__atomic_load_n(&link_fd, __ATOMIC_ACQUIRE) < 0)
        return UINT64_MAX;
    int s = __atomic_load_n(&link_slot, __ATOMIC_RELAXED);
    uint32_t port = __atomic_load_n(&link_port, __ATOMIC_RELAXED);
    if (s < 0 || __atomic_load_n(&primary->links[s].port, __ATOMIC_ACQUIRE) != port) {
        for (s = VT_REPLICA_LINKS - 1; s >= 0 && __atomic_load_n(&primary->links[s].port, __ATOMIC_ACQUIRE) != port; s--)
            ;
        if (s < 0)
            return UINT64_MAX;
        __atomic_store_n(&link_slot, s, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&primary->links[s].committed, __ATOMIC_ACQUIRE);
}

/* -- commands: which arguments are keys (the server's own table, as valkeytrace wrote it for the primary) -- */
static void k_begin(void *ctx, int64_t argc)
{
    struct keyset *k = ctx;
    k->argc = argc, k->n = 0, k->wide = argc < 0, k->known = 0;
}

static int is_key(const struct keyset *k, int64_t i)
{
    if (!k->known || (k->ci.flags & (VT_CMD_F_MOVABLE | VT_CMD_F_CONTAINER)))
        return 1; /* not known where its keys are: every argument may be one */
    int64_t last = k->ci.last < 0 ? k->argc + k->ci.last : k->ci.last;
    return k->ci.first > 0 && i >= k->ci.first && i <= last && (i - k->ci.first) % k->ci.step == 0;
}

static void k_arg(void *ctx, int64_t i, uint64_t len, uint64_t h, const char *p, size_t plen)
{
    struct keyset *k = ctx;
    if (i == 0) {
        k->known = len == plen && vt_cmds_lookup(p, plen, &k->ci);
        if (!k->known || (k->ci.flags & VT_CMD_F_NOKEYS && k->ci.flags & VT_CMD_F_WRITE))
            k->wide |= !k->known || k->ci.first == 0; /* FLUSHALL, an unknown command: the whole keyspace */
    } else if (is_key(k, i)) {
        if (k->n == KEYS_MAX)
            k->wide = 1;
        else
            k->h[k->n++] = h;
    }
}

static void link_end(void *ctx)
{
    for (int i = 0; i < lk.n; i++)
        amax(&slot_off[slot(lk.h[i])], feed_end);
    if (lk.wide && lk.argc != 0)
        amax(&wide_off, feed_end);
}
static void link_error(void *ctx) { vt_req_init(&lp, 0); }
static const struct vt_req_cb LINK_CB = {k_begin, k_arg, link_end, link_error};

/* a full sync's payload ends at link offset `at`: every key it loaded may hold a write the primary had not made
 * durable (the snapshot is its memory), so every read waits until the primary's committed offset passes it */
static void snapshot_end(uint64_t at) { amax(&wide_off, at); }

/* the link's bytes: the PSYNC reply, a full sync's payload (skipped), then the stream (parsed); b ends at feed_end */
static void link_feed(const char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        if (lstate == 4) {
            vt_req_feed(&lp, b + i, n - i, &LINK_CB, &lk);
            return;
        }
        if (lstate == 2) { /* a payload of known length */
            size_t take = (size_t)payload_left < n - i ? (size_t)payload_left : n - i;
            payload_left -= (int64_t)take, i += take;
            lstate = payload_left ? 2 : 4;
            if (lstate == 4)
                snapshot_end(feed_end - (n - i));
            continue;
        }
        char ch = b[i++];
        if (lstate == 3) { /* diskless: the payload ends with its mark */
            if (tail_n == MARK)
                memmove(tailbuf, tailbuf + 1, MARK - 1), tail_n--;
            tailbuf[tail_n++] = ch;
            lstate = tail_n == MARK && !memcmp(tailbuf, mark, MARK) ? 4 : 3;
            if (lstate == 4)
                snapshot_end(feed_end - (n - i));
            continue;
        }
        if (ch == '\n' && lstate == 1 && !line_n)
            continue; /* the primary's keep-alive newlines while it prepares the payload */
        if (ch != '\n') {
            if (line_n < sizeof(line) - 1)
                line[line_n++] = ch;
            continue;
        }
        line[line_n] = 0;
        if (lstate == 0)
            lstate = !strncmp(line, "+FULLRESYNC", 11) ? 1 : !strncmp(line, "+CONTINUE", 9) ? 4 : 0;
        else if (!strncmp(line, "$EOF:", 5) && line_n >= 5 + MARK)
            memcpy(mark, line + 5, MARK), tail_n = 0, lstate = 3;
        else if (line[0] == '$' && (payload_left = strtoll(line + 1, NULL, 10)) > 0)
            lstate = 2;
        else if (line[0] == '$')
            lstate = 4, snapshot_end(feed_end - (n - i));
        line_n = 0;
    }
}

/* -- client connections -- */
/* the client parser's context is its connection's keyset (c->cur): the connection around it */
static struct rconn *conn_of_keys(void *ctx) { return (struct rconn *)((char *)ctx - offsetof(struct rconn, cur)); }

static void c_end(void *ctx)
{
    struct rconn *c = conn_of_keys(ctx);
    for (int i = 0; i < c->cur.n; i++) {
        if (c->npending == KEYS_MAX)
            c->wide = 1;
        else
            c->pending[c->npending++] = c->cur.h[i];
    }
    c->wide |= c->cur.wide && c->cur.argc != 0;
}
static void c_error(void *ctx) { conn_of_keys(ctx)->wide = 1; }
static const struct vt_req_cb CLIENT_CB = {k_begin, k_arg, c_end, c_error};

void vt_replica_read(int fd, const void *buf, ssize_t n)
{
    if (n <= 0 || fd < 0 || fd >= VT_MAX_FD)
        return;
    if (fd == __atomic_load_n(&link_fd, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&link_mu);
        feed_end = __atomic_add_fetch(&link_read, (uint64_t)n, __ATOMIC_ACQ_REL);
        link_feed(buf, (size_t)n);
        pthread_mutex_unlock(&link_mu);
        return;
    }
    struct rconn *c = __atomic_load_n(&conns[fd], __ATOMIC_ACQUIRE);
    if (!c || !__atomic_load_n(&c->active, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&c->mu);
    vt_req_feed(&c->p, buf, (size_t)n, &CLIENT_CB, &c->cur);
    if (c->p.errors)
        vt_req_init(&c->p, 1);
    pthread_mutex_unlock(&c->mu);
}

/* what a reply of c's pending commands waits for: the last write to any key they named */
static uint64_t need_locked(struct rconn *c)
{
    uint64_t need = c->wide ? __atomic_load_n(&link_read, __ATOMIC_ACQUIRE) : 0;
    uint64_t w = __atomic_load_n(&wide_off, __ATOMIC_ACQUIRE);
    for (int i = 0; i < c->npending; i++) {
        uint64_t o = __atomic_load_n(&slot_off[slot(c->pending[i])], __ATOMIC_ACQUIRE);
        need = o > need ? o : need;
    }
    if (c->npending || c->wide)
        need = w > need ? w : need;
    c->npending = c->wide = 0;
    return need;
}

/* the release thread sleeps on the link's wake word (offload_layout.h) when it waits for the committed offset:
 * the primary bumps it as the offset moves; this shim too, when the thread has something new to look at */
static void wake_slot(int s)
{
    if (s < 0)
        return; /* the thread waits on no word (it finds the link's entry when it looks next) */
    __atomic_add_fetch(&primary->links[s].wake, 1, __ATOMIC_ACQ_REL);
    syscall(SYS_futex, &primary->links[s].wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
static void wake_release(void) { wake_slot(__atomic_load_n(&link_slot, __ATOMIC_ACQUIRE)); }

/* 1: listed for the release thread (0: no memory to list it: nothing may be held) */
static int list_locked(struct rconn *c, int fd)
{
    pthread_mutex_lock(&held_mu);
    if (!c->listed && held_n == held_cap) {
        int cap = held_cap ? 2 * held_cap : 256, *grown = realloc(held_fds, (size_t)cap * sizeof(int));
        held_fds = grown ? grown : held_fds, held_cap = grown ? cap : held_cap;
    }
    int ok = c->listed || held_n < held_cap, fresh = !c->listed && ok;
    if (fresh)
        held_fds[held_n++] = fd, c->listed = 1, pthread_cond_signal(&held_cv);
    pthread_mutex_unlock(&held_mu);
    if (fresh) /* (a listed connection's new reply waits behind its others: the thread needs no word of it) */
        wake_release();
    return ok;
}

static void unlist_locked(struct rconn *c, int fd)
{
    pthread_mutex_lock(&held_mu);
    for (int i = 0; c->listed && i < held_n; i++)
        if (held_fds[i] == fd)
            held_fds[i] = held_fds[--held_n], c->listed = 0;
    pthread_mutex_unlock(&held_mu);
}

static void drop_locked(struct rconn *c)
{
    for (struct chunk *next; c->head; c->head = next)
        next = c->head->next, free(c->head);
    c->tail = NULL;
}

#define PSYNC_MAX 256 /* a PSYNC or SYNC command is well under this: longer writes (the AOF's, replies) are not one */

static int note_link(int fd, const struct iovec *iov, int iovcnt)
{
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    if (total > PSYNC_MAX)
        return 0;
    for (int i = 0; i < iovcnt; i++) {
        if (!memmem(iov[i].iov_base, iov[i].iov_len, "PSYNC", 5) && !memmem(iov[i].iov_base, iov[i].iov_len, "SYNC\r\n", 6))
            continue;
        struct sockaddr_in a;
        socklen_t len = sizeof(a);
        pthread_mutex_lock(&link_mu);
        int old = __atomic_load_n(&link_slot, __ATOMIC_ACQUIRE);
        memset(slot_off, 0, sizeof(slot_off)); /* a new link counts from 0 again */
        wide_off = link_read = 0, lstate = 0, line_n = 0;
        vt_req_init(&lp, 0);
        __atomic_store_n(&link_port, getsockname(fd, (struct sockaddr *)&a, &len) == 0 ? ntohs(a.sin_port) : 0,
                         __ATOMIC_RELAXED);
        __atomic_store_n(&link_slot, -1, __ATOMIC_RELAXED);
        __atomic_store_n(&link_fd, fd, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&link_mu);
        wake_slot(old); /* the thread sleeps on the old link's word no longer */
        return 1;
    }
    return 0;
}

int vt_replica_writev(int fd, const struct iovec *iov, int iovcnt, ssize_t *ret)
{
    struct rconn *c = fd >= 0 && fd < VT_MAX_FD ? __atomic_load_n(&conns[fd], __ATOMIC_ACQUIRE) : NULL;
    if (!c || !__atomic_load_n(&c->active, __ATOMIC_ACQUIRE)) {
        if (fd != __atomic_load_n(&link_fd, __ATOMIC_ACQUIRE))
            note_link(fd, iov, iovcnt);
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    pthread_mutex_lock(&c->mu);
    uint64_t need = need_locked(c);
    if (c->tail && c->tail->need > need)
        need = c->tail->need;
    struct chunk *ch = !total || (!c->head && need <= committed()) ? NULL : malloc(sizeof(*ch) + total);
    if (!ch) { /* nothing to hold (or no memory: written now, as a replica that does not block would) */
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    ch->next = NULL, ch->need = need, ch->len = total, ch->off = 0;
    for (size_t at = 0, i = 0; i < (size_t)iovcnt; at += iov[i].iov_len, i++)
        memcpy(ch->data + at, iov[i].iov_base, iov[i].iov_len);
    if (!list_locked(c, fd)) { /* (c->head is empty: a listed connection never fails here) */
        free(ch);
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    if (c->tail)
        c->tail->next = ch;
    else
        c->head = ch;
    c->tail = ch;
    pthread_mutex_unlock(&c->mu);
    *ret = (ssize_t)total;
    return 1;
}

/* the held replies whose keys the primary has made durable, written in order (non-blocking sockets: the
 * rest when the socket takes it). 0: none left, 1: some wait for the committed offset, 2: the socket is full */
static int release(int fd, uint64_t com)
{
    struct rconn *c = conns[fd];
    int status = 0;
    pthread_mutex_lock(&c->mu);
    while (c->head && c->head->need <= com) {
        struct chunk *h = c->head;
        ssize_t w = vt_real.write(fd, h->data + h->off, h->len - h->off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            status = 2;
            break;
        }
        if (w <= 0) { /* the client went: the server meets it at its next read */
            drop_locked(c);
            break;
        }
        h->off += (size_t)w;
        if (h->off < h->len)
            continue; /* the rest: the socket took part of it, it may take more (else EAGAIN) */
        c->head = h->next;
        c->tail = c->head ? c->tail : NULL;
        free(h);
    }
    if (!c->head)
        unlist_locked(c, fd);
    else if (!status)
        status = 1;
    pthread_mutex_unlock(&c->mu);
    return status;
}

/* the listed connections copied into *fds (grown as needed); -1: no memory */
static int copy_listed(int **fds, struct pollfd **pf, int *cap)
{
    pthread_mutex_lock(&held_mu);
    int n = held_n;
    if (n > *cap) {
        int *f = realloc(*fds, (size_t)n * sizeof(int));
        *fds = f ? f : *fds;
        struct pollfd *p = f ? realloc(*pf, (size_t)n * sizeof(struct pollfd)) : NULL;
        *pf = p ? p : *pf;
        *cap = p ? n : *cap;
    }
    if (n <= *cap)
        memcpy(*fds, held_fds, (size_t)n * sizeof(int));
    pthread_mutex_unlock(&held_mu);
    return n <= *cap ? n : -1;
}

/* Sleeps until there is something to do: nothing held (held_cv), replies waiting for the committed offset (the
 * link's wake word, read before the list and the offset: a move or a new reply after it never goes unseen), a
 * client's full socket (poll). It never wakes on a timer but the SAFETY_MS one. */
static void *release_main(void *arg)
{
    int *fds = NULL, cap = 0;
    struct pollfd *pf = NULL;
    for (;;) {
        pthread_mutex_lock(&held_mu);
        while (!held_n)
            pthread_cond_wait(&held_cv, &held_mu);
        pthread_mutex_unlock(&held_mu);
        int s = __atomic_load_n(&link_slot, __ATOMIC_ACQUIRE), blocked = 0, waiting = 0;
        uint32_t seq = s >= 0 ? __atomic_load_n(&primary->links[s].wake, __ATOMIC_ACQUIRE) : 0;
        int n = copy_listed(&fds, &pf, &cap);
        uint64_t com = committed();
        for (int i = 0; i < n; i++) {
            int r = release(fds[i], com);
            waiting |= r == 1;
            if (r == 2)
                pf[blocked++] = (struct pollfd){fds[i], POLLOUT, 0};
        }
        struct timespec safety = {SAFETY_MS / 1000, (SAFETY_MS % 1000) * 1000000L};
        if (n < 0) /* no memory for the copy: look again later */
            nanosleep(&safety, NULL);
        else if (blocked)
            poll(pf, (nfds_t)blocked, BLOCKED_MS);
        else if (waiting && s >= 0 && s == __atomic_load_n(&link_slot, __ATOMIC_ACQUIRE))
            syscall(SYS_futex, &primary->links[s].wake, FUTEX_WAIT, seq, &safety, NULL, 0);
    } /* else all released, or the link's entry found meanwhile: at once again */
    return NULL;
}

void vt_replica_accepted(int fd)
{
    if (fd < 0 || fd >= VT_MAX_FD)
        return;
    struct rconn *c = conns[fd];
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return; /* not followed: its replies are never held */
        pthread_mutex_init(&c->mu, NULL);
        __atomic_store_n(&conns[fd], c, __ATOMIC_RELEASE);
    }
    pthread_mutex_lock(&c->mu);
    drop_locked(c);
    vt_req_init(&c->p, 1);
    c->npending = c->wide = 0;
    __atomic_store_n(&c->active, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
}

void vt_replica_close(int fd)
{
    if (fd < 0 || fd >= VT_MAX_FD)
        return;
    if (fd == __atomic_load_n(&link_fd, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&link_fd, -1, __ATOMIC_RELEASE); /* no link: nothing to wait for (what was held leaves) */
        wake_release();
    }
    struct rconn *c = __atomic_load_n(&conns[fd], __ATOMIC_ACQUIRE);
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    drop_locked(c);
    unlist_locked(c, fd);
    __atomic_store_n(&c->active, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->mu);
}

int vt_replica_enabled(void) { return enabled; }
void vt_replica_after_fork_child(void) { enabled = 0; }

int vt_replica_init(void)
{
    size_t size = 0;
    pthread_t t;
    primary = vt_map_shared(getenv("VALKEYTRACE_REPLICA_COMMIT"), sizeof(*primary), &size);
    if (!primary)
        return 0;
    vt_cmds_attach(&primary->control, NULL);
    if (pthread_create(&t, NULL, release_main, NULL) != 0)
        return 0; /* no thread to release what is held: hold nothing */
    pthread_detach(t);
    enabled = 1;
    return 1;
}
