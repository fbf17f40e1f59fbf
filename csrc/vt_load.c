/*
 * vt_load.c: valkeytrace's open-loop client (vt_load.h).
 *
 * The schedule is fixed before anything is answered: request i is due at t0 + the sum of the gaps
 * (each 1/rate, or drawn from an exponential of that mean), whatever the server does. A due request
 * goes out on an idle connection; when every connection waits, another is opened (a stalled server's
 * kernel still accepts it), up to max_conns, then either it waits in the client for the first
 * connection to be answered (hold: one request in flight per connection, a fixed population of
 * clients), or the next connection in turn carries it behind the others (pipelined: the server
 * answers a connection's requests in order). Its latency counts from the
 * moment it was due (a stall is paid by every request due during it, not once per connection: the
 * coordinated omission wrk2 and HdrHistogram correct), its service time from the moment its last
 * byte left. The loop sleeps in epoll_pwait2 until the next request is due (nanoseconds).
 */
#define _GNU_SOURCE
#include "vt_load.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hist.h"
#include "stall_log.h"
#include "vt_arrivals.h"
#include "vt_inflight.h"

#define MAX_EVENTS 256
#define READ_BUF (64 * 1024)

struct pending {
    uint64_t due, end_off, sent;
    uint64_t seq;   /* --verify-durability: the SET's sequence, in its value (0: not kept) */
    uint64_t floor; /* the oldest of it and its key's SETs in flight on other connections as it was sent */
    uint32_t key;
    uint32_t node;  /* its entry among its key's SETs in flight (vt_inflight.h), 0: none */
};

struct lconn {
    int fd, want_out, idle;
    char *out;                  /* bytes handed to the connection, not yet written */
    uint32_t out_len, out_cap;
    uint64_t written, queued;   /* bytes written / handed over since it opened */
    struct pending *q;          /* its requests outstanding, in order */
    uint32_t qh, qt, qcap, unstamped; /* unstamped: the first not yet sent whole */
    struct vt_reply reply;      /* the reply being read (vt_arrivals.h) */
};

struct loader {
    const struct vt_load_config *cfg;
    struct vt_load_result *res;
    struct lconn *c;
    uint32_t n, cap, *idle, idle_n, idle_cap, rr;
    uint64_t *held;             /* due moments waiting for a free connection (hold), a ring */
    uint32_t held_h, held_n, held_cap;
    int ep;
    uint64_t rng, ws, we;
    char *req;                  /* the request's bytes, its key (and a kept SET's sequence) rewritten in place */
    uint32_t req_len, key_at, val_at;
    uint64_t last_seq;
    struct vt_inflight fl; /* per key, SETs carrying a sequence: those in flight, and the floor each sets */
    struct vt_reader rd; /* readers on a replica (cfg->readers), GETs of the key sent last */
    uint32_t last_key;
};

static uint64_t mono_ns(void) { return vt_mono_ns(); }

static int push_idle(struct loader *l, struct lconn *c)
{
    if (c->idle)
        return 0;
    if (vt_grow((void **)&l->idle, &l->idle_cap, sizeof(uint32_t), l->idle_n + 1))
        return ENOMEM;
    l->idle[l->idle_n++] = (uint32_t)(c - l->c);
    c->idle = 1;
    return 0;
}

static int open_conn(struct loader *l)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)l->cfg->port)};
    int one = 1;
    if (inet_pton(AF_INET, l->cfg->host, &a.sin_addr) != 1)
        return EINVAL;
    if (vt_grow((void **)&l->c, &l->cap, sizeof(struct lconn), l->n + 1))
        return ENOMEM;
    /* non-blocking from the start: a connect the server's backlog holds does not stop the schedule; a
     * request queued meanwhile goes out when the socket is writable (flush's EAGAIN path), a refused
     * connection shows at its first read */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return e;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = l->n};
    if (epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    struct lconn *c = &l->c[l->n];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    l->n++;
    l->res->conns++;
    return push_idle(l, c);
}

/* the connection a due request goes out on: an idle one, else a new one, else the next in turn */
static struct lconn *pick(struct loader *l, int *pipelined)
{
    *pipelined = 0;
    while (l->idle_n) {
        struct lconn *c = &l->c[l->idle[--l->idle_n]];
        c->idle = 0;
        if (c->qt == c->qh && c->fd >= 0)
            return c;
    }
    if (l->n < (uint32_t)l->cfg->max_conns && open_conn(l) == 0) {
        struct lconn *c = &l->c[l->idle[--l->idle_n]];
        c->idle = 0;
        return c;
    }
    if (!l->n || l->cfg->hold)
        return NULL;
    *pipelined = 1;
    l->rr = (l->rr + 1) % l->n;
    return &l->c[l->rr];
}

static void stamp_sent(struct lconn *c, uint64_t now)
{
    if (c->unstamped < c->qh)
        c->unstamped = c->qh;
    while (c->unstamped < c->qt && c->q[c->unstamped].end_off <= c->written)
        c->q[c->unstamped++].sent = now;
}

static void flush(struct loader *l, struct lconn *c, uint64_t now)
{
    while (c->out_len) {
        ssize_t w = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            break; /* EAGAIN: the rest when the socket takes it; an error shows at its read */
        }
        memmove(c->out, c->out + w, c->out_len - (uint32_t)w);
        c->out_len -= (uint32_t)w;
        c->written += (uint64_t)w;
    }
    stamp_sent(c, now);
    int want = c->out_len > 0;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.u32 = (uint32_t)(c - l->c)};
        if (epoll_ctl(l->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
            c->want_out = want;
        else
            l->res->errors++; /* its bytes wait for the next flush on this connection */
    }
}

static int send_on(struct loader *l, struct lconn *c, uint64_t due, uint64_t now, int pipelined)
{
    char key[20];
    uint32_t k = l->cfg->keys && l->cfg->nkeys ? l->cfg->keys[vt_rand(&l->rng) % l->cfg->nkeys]
                                              : (uint32_t)(vt_rand(&l->rng) % (l->cfg->keyspace ? l->cfg->keyspace : 1));
    uint64_t seq = 0, floor = 0;
    uint32_t node = 0;
    snprintf(key, sizeof(key), "%012u", (unsigned)k);
    memcpy(l->req + l->key_at, key, 12);
    l->last_key = k;
    if (l->val_at) { /* a later value always has a larger sequence: a clock that only rises, strictly */
        seq = vt_mono_ns() + l->cfg->seq_epoch;
        seq = l->last_seq = seq > l->last_seq ? seq : l->last_seq + 1;
        snprintf(key, sizeof(key), "%016llx", (unsigned long long)seq);
        memcpy(l->req + l->val_at, key, 16);
        if (!(node = vt_inflight_sent(&l->fl, k, (uint32_t)(c - l->c), seq, &floor)))
            return -1;
    }
    if (c->qh && c->qt == c->qcap) { /* the answered head's room first: the queue grows only when full */
        memmove(c->q, c->q + c->qh, (size_t)(c->qt - c->qh) * sizeof(struct pending));
        c->qt -= c->qh;
        c->unstamped -= c->unstamped >= c->qh ? c->qh : c->unstamped;
        c->qh = 0;
    }
    if (vt_grow((void **)&c->out, &c->out_cap, 1, c->out_len + l->req_len) ||
        vt_grow((void **)&c->q, &c->qcap, sizeof(struct pending), c->qt + 1)) {
        if (node) /* never sent: in flight it would hold the key's floors down for the rest of the run */
            vt_inflight_answered(&l->fl, k, node);
        return -1;
    }
    memcpy(c->out + c->out_len, l->req, l->req_len);
    c->out_len += l->req_len;
    c->queued += l->req_len;
    c->q[c->qt++] = (struct pending){due, c->queued, 0, seq, floor, k, node};
    l->res->pipelined += (uint64_t)pipelined;
    flush(l, c, now);
    return 0;
}

/* a due request waits for a free connection (hold): the ring doubles when full */
static int hold_one(struct loader *l, uint64_t due)
{
    if (vt_ring_push(&l->held, &l->held_h, &l->held_n, &l->held_cap, due))
        return -1;
    l->res->held++;
    if (l->held_n > l->res->held_max)
        l->res->held_max = l->held_n;
    return 0;
}

static int send_one(struct loader *l, uint64_t due, uint64_t now)
{
    int pipelined;
    struct lconn *c = pick(l, &pipelined);
    if (!c)
        return l->cfg->hold && l->n ? hold_one(l, due) : -1;
    return send_on(l, c, due, now, pipelined);
}

/* one reply read off c: pop its request, count it */
static void answered(struct loader *l, struct lconn *c, uint64_t now)
{
    if (c->qh == c->qt)
        return; /* a reply no request of ours asked for */
    struct pending p = c->q[c->qh++];
    vt_inflight_answered(&l->fl, p.key, p.node); /* no longer in flight, whatever the reply */
    if (c->qh == c->qt) {
        c->qh = c->qt = c->unstamped = 0; /* empty: from the start again (the indices never run on) */
        if (l->held_n) { /* the oldest request waiting goes out on the connection just answered */
            uint64_t due = l->held[l->held_h];
            l->held_h = (l->held_h + 1) % l->held_cap;
            l->held_n--;
            if (send_on(l, c, due, now, 0))
                l->res->errors++;
        } else {
            push_idle(l, c);
        }
    }
    if (c->reply.kind == '-')
        l->res->errors++, l->res->rejected++;
    /* acknowledged: the key holds it or a later write from now on, so one at its floor or above (one in
     * flight beside it on another connection may have run after it: the server orders connections) */
    if (c->reply.kind == '+' && p.seq && l->cfg->acked && (!l->cfg->cut_after_ns || now <= l->ws + l->cfg->cut_after_ns)) {
        l->res->acked++;
        if (p.floor > l->cfg->acked[p.key])
            l->cfg->acked[p.key] = p.floor;
    }
    if (p.due < l->ws || p.due >= l->we)
        return;
    struct vt_load_result *r = l->res;
    r->answered++;
    r->answered_in_window += now <= l->we;
    if (now <= l->we + l->cfg->drain_ns) {
        r->answered_drained++;
        if (!r->first_answer_ns)
            r->first_answer_ns = now;
        r->last_answer_ns = now;
    }
    if (p.sent && p.sent - p.due > l->cfg->late_ns)
        r->late++;
    vt_hist_record(&r->corrected, now - p.due);
    if (l->cfg->stalls) /* due during an injected stall, or outside every one */
        vt_hist_record(vt_stall_covers(l->cfg->stalls, p.due) ? &r->in_stall : &r->outside, now - p.due);
    vt_hist_record(&r->service, now - (p.sent ? p.sent : p.due));
}

/* the replies in buf, each counted as it ends (vt_reply_next) */
static void parse(struct loader *l, struct lconn *c, const char *buf, size_t n, uint64_t now)
{
    for (size_t i = 0; vt_reply_next(&c->reply, buf, n, &i, NULL, NULL);)
        answered(l, c, now);
}

static void marker(const struct vt_load_config *cfg, const char *m)
{
    if (cfg->marker_fd >= 0 && write(cfg->marker_fd, m, 2) < 0)
        return;
}

static int build_request(struct loader *l)
{
    const struct vt_load_config *cfg = l->cfg;
    uint32_t vs = cfg->op == VT_LOAD_SET ? cfg->value_size : 0;
    size_t cap = 96 + vs;
    l->req = malloc(cap);
    if (!l->req)
        return -1;
    int head = snprintf(l->req, cap, cfg->op == VT_LOAD_SET ? "*3\r\n$3\r\nSET\r\n$16\r\nkey:" : "*2\r\n$3\r\nGET\r\n$16\r\nkey:");
    l->key_at = (uint32_t)head;
    memset(l->req + head, '0', 12);
    size_t len = (size_t)head + 12;
    len += (size_t)snprintf(l->req + len, cap - len, "\r\n");
    if (cfg->op == VT_LOAD_SET) {
        len += (size_t)snprintf(l->req + len, cap - len, "$%u\r\n", vs);
        memset(l->req + len, 'x', vs);
        l->val_at = (cfg->acked || cfg->readers) && vs >= 16 ? (uint32_t)len : 0;
        len += vs;
        len += (size_t)snprintf(l->req + len, cap - len, "\r\n");
    }
    l->req_len = (uint32_t)len;
    return 0;
}

int vt_load_run(const struct vt_load_config *cfg, struct vt_load_result *res)
{
    struct loader l = {.cfg = cfg, .res = res, .rng = cfg->seed ? cfg->seed : 0x9E3779B97F4A7C15ull};
    struct epoll_event evs[MAX_EVENTS];
    static char buf[READ_BUF];
    memset(res, 0, sizeof(*res));
    vt_hist_reset(&res->corrected);
    vt_hist_reset(&res->service);
    vt_hist_reset(&res->in_stall);
    vt_hist_reset(&res->outside);
    int closed = cfg->rate == 0, bad = cfg->rate < 0 || build_request(&l);
    if (!bad && l.val_at)
        bad = vt_inflight_init(&l.fl, cfg->keyspace);
    if (bad || (cfg->acked && cfg->op == VT_LOAD_SET && !l.val_at)) {
        res->error = EINVAL;
        snprintf(res->message, sizeof(res->message), "a rate of 0 or more is needed (and values of 16 B or more to keep acknowledged SETs)");
        vt_inflight_free(&l.fl), free(l.req);
        return -1;
    }
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake when a request is due, not 50 µs after */
    l.ep = epoll_create1(EPOLL_CLOEXEC);
    if (l.ep < 0) {
        res->error = errno;
        snprintf(res->message, sizeof(res->message), "epoll_create1: %s", strerror(res->error));
        vt_inflight_free(&l.fl), free(l.req);
        return -1;
    }
    for (int i = 0; i < (cfg->conns > 0 ? cfg->conns : 1); i++) {
        int e = open_conn(&l);
        if (e) {
            res->error = e;
            snprintf(res->message, sizeof(res->message), "cannot connect to %s:%d: %s", cfg->host, cfg->port, strerror(e));
            break;
        }
    }
    uint64_t start = mono_ns();
    l.ws = start + cfg->warmup_ns;
    l.we = l.ws + cfg->duration_ns;
    l.rd = (struct vt_reader){.ws = l.ws, .we = l.we, .seen = cfg->seen, .keyspace = cfg->keyspace, .log = cfg->reads,
                              .log_cap = cfg->reads_cap, .st = &res->replica};
    vt_hist_reset(&res->replica.latency);
    int e = !res->error && cfg->readers ? vt_reader_open(&l.rd, l.ep, cfg->replica_host, cfg->replica_port, cfg->readers) : 0;
    if (e)
        res->error = e, snprintf(res->message, sizeof(res->message), "cannot connect to the replica %s:%d: %s",
                                 cfg->replica_host, cfg->replica_port, strerror(e));
    res->window_start_ns = l.ws;
    res->window_end_ns = l.we;
    uint64_t nw = (uint64_t)(cfg->rate * (double)cfg->warmup_ns / 1e9 + 0.5);
    uint64_t nm = (uint64_t)(cfg->rate * (double)cfg->duration_ns / 1e9 + 0.5);
    int uniform = cfg->arrival == VT_LOAD_UNIFORM;
    uint64_t *warm = closed ? NULL : vt_arrivals(&l.rng, uniform, start, cfg->warmup_ns, nw);
    uint64_t *due = closed ? NULL : vt_arrivals(&l.rng, uniform, l.ws, cfg->duration_ns, nm);
    uint64_t iw = 0, im = 0;
    if (!closed && (!warm || !due)) {
        res->error = ENOMEM;
        snprintf(res->message, sizeof(res->message), "out of memory for %llu requests", (unsigned long long)(nw + nm));
    }
    int began = 0, ended = 0;
    while (!res->error) {
        uint64_t now = mono_ns(), next;
        if (!began && now >= l.ws)
            began = 1, marker(cfg, "B\n");
        /* everything due by now goes out now */
        while ((next = iw < nw ? warm[iw] : im < nm ? due[im] : UINT64_MAX) <= now) {
            if (send_one(&l, next, now)) {
                res->error = ENOMEM;
                snprintf(res->message, sizeof(res->message), "out of memory");
                break;
            }
            if (iw < nw)
                iw++;
            else
                im++, res->due++;
        }
        for (int p; closed && now < l.we && l.idle_n;) { /* closed loop: the next request as soon as one is free */
            struct lconn *c = pick(&l, &p);
            if (!c || send_on(&l, c, now, now, 0))
                break;
            res->due += now >= l.ws;
        }
        vt_reader_kick(&l.rd, l.last_key, now);
        if (!ended && now >= l.we)
            ended = 1, marker(cfg, "E\n");
        if (ended && (res->answered >= res->due || now >= l.we + cfg->grace_ns))
            break;
        /* held requests past the drain: saturated (the achieved rate is known; the rest is unanswered) */
        if (ended && l.held_n && now >= l.we + cfg->drain_ns)
            break;
        uint64_t wake = next != UINT64_MAX && next < l.we ? next : l.we + (ended ? cfg->grace_ns : 0);
        if (ended && l.held_n && wake > l.we + cfg->drain_ns)
            wake = l.we + cfg->drain_ns;
        struct timespec ts = {0, 0};
        if (wake > now) {
            ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
            ts.tv_nsec = (long)((wake - now) % 1000000000ull);
        }
        int k = epoll_pwait2(l.ep, evs, MAX_EVENTS, &ts, NULL);
        now = mono_ns();
        for (int i = 0; i < k; i++) {
            if (evs[i].data.u32 & VT_READER_TAG) {
                ssize_t r = recv(l.rd.c[evs[i].data.u32 & ~VT_READER_TAG].fd, buf, sizeof(buf), 0);
                if (r > 0)
                    vt_reader_input(&l.rd, evs[i].data.u32 & ~VT_READER_TAG, buf, r, now);
                else if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    res->error = r == 0 ? ECONNRESET : errno, snprintf(res->message, sizeof(res->message), "the replica closed a reader");
                continue;
            }
            struct lconn *c = &l.c[evs[i].data.u32];
            if (evs[i].events & EPOLLOUT)
                flush(&l, c, now);
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
                if (r > 0)
                    parse(&l, c, buf, (size_t)r, now);
                else if (cfg->survive && (r == 0 || (errno != EAGAIN && errno != EINTR))) {
                    epoll_ctl(l.ep, EPOLL_CTL_DEL, c->fd, NULL); /* its server is gone: never picked again */
                    close(c->fd);
                    c->fd = -1;
                    res->errors += c->qt - c->qh;
                    c->qh = c->qt;
                } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    res->error = r == 0 ? ECONNRESET : errno;
                    snprintf(res->message, sizeof(res->message), "the server closed a connection (%s)",
                             strerror(res->error));
                }
            }
        }
    }
    for (uint32_t i = 0; i < l.n; i++) {
        for (uint32_t j = l.c[i].qh; j < l.c[i].qt; j++)
            res->sent += l.c[i].q[j].sent != 0 && l.c[i].q[j].due >= l.ws && l.c[i].q[j].due < l.we;
        close(l.c[i].fd);
        free(l.c[i].out);
        free(l.c[i].q);
    }
    res->sent += res->answered;
    for (uint32_t i = 0; i < l.held_n; i++) { /* still held at the end: never sent, late all the same */
        uint64_t d = l.held[(l.held_h + i) % l.held_cap];
        res->late += d >= l.ws && d < l.we;
    }
    res->unanswered = res->due > res->answered ? res->due - res->answered : 0;
    vt_reader_close(&l.rd);
    close(l.ep);
    free(l.c);
    free(l.idle);
    free(l.held);
    free(l.req);
    vt_inflight_free(&l.fl);
    free(warm);
    free(due);
    return res->error ? -1 : 0;
}
