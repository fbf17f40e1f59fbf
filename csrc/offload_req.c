/*
 * offload_req.c: a client connection's requests, for the virtual offload: parsed (vt_resp.h)
 * into a FIFO of commands, each classified by the server's own command table (vt_cmds.h), the
 * keys of its writes marked pending in the key table until the reply is framed (offload_conn.c).
 * MULTI/EXEC, CLIENT REPLY, pub/sub and MONITOR are followed by name: they are the protocol,
 * not data classes.
 */
#define _GNU_SOURCE
#include "offload.h"
#include "offload_bound.h"
#include "offload_conn.h"
#include "offload_conn_int.h"
#include "vt_grow.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* -- the queues ----------------------------------------------------------------------------- */

static int push_hash(struct conn *c, uint64_t h)
{
    if (c->ht == c->hcap && c->hh) { /* slide down: the tail keeps its place relative to the head */
        memmove(c->hv, c->hv + c->hh, (size_t)(c->ht - c->hh) * sizeof(uint64_t));
        c->tx_start -= c->in_multi ? c->hh : 0;
        c->ht -= c->hh;
        c->hh = 0;
    }
    if (c->ht == c->hcap && vt_grow((void **)&c->hv, &c->hcap, sizeof(uint64_t), c->ht + 1)) {
        vt_conn_unsync(c); /* no memory: its replies wait for everything, nothing made pending */
        return 0;
    }
    c->hv[c->ht++] = h;
    c->nh++;
    return 1;
}

static void push_entry(struct conn *c, int kind, int blocking, uint32_t nwide, uint32_t nh)
{
    if (c->unsynced)
        return;
    blocking |= c->qt > c->qh && c->q[c->qt - 1].blocking; /* behind a blocked command: not run before it */
    if (c->qt == c->qcap && c->qh) {
        memmove(c->q, c->q + c->qh, (size_t)(c->qt - c->qh) * sizeof(struct entry));
        c->qt -= c->qh;
        c->qh = 0;
    }
    if (c->qt == c->qcap && vt_grow((void **)&c->q, &c->qcap, sizeof(struct entry), c->qt + 1)) {
        vt_conn_unsync(c);
        return;
    }
    c->q[c->qt++] = (struct entry){(uint8_t)kind, (uint8_t)!!blocking, (uint16_t)nwide, nh};
    vt_stat_add(&vt_off.stats->pending_now, 1);
    if (blocking)
        vt_bound_uncounted(1);
}

/* hashes [from, to): what they made pending is settled: at seq (their commands may have run), or
 * handed to the deferred-wide count (they may not have run yet: out of sync) */
static void settle(struct conn *c, uint32_t from, uint32_t to, int defer)
{
    uint64_t q = vt_off_queued();
    for (uint32_t i = from; i < to; i++) {
        uint64_t h = c->hv[i];
        if (h & (H_PEND | H_COMMIT)) {
            if (defer) {
                if (h & H_PEND)
                    vt_keys_pending(h, -1);
                vt_defer_wide();
            } else {
                vt_keys_commit(h, q, (h & H_PEND) != 0, vt_off_durable());
            }
        }
    }
}

void vt_conn_settle_all(struct conn *c, int defer)
{
    uint64_t wide = c->tx_wide;
    int64_t blocked = 0;
    for (uint32_t i = c->qh; i < c->qt; i++)
        wide += c->q[i].nwide, blocked += c->q[i].blocking;
    vt_bound_uncounted(-blocked);
    settle(c, c->hh, c->ht, defer);
    vt_stat_add(&vt_off.stats->pending_now, -(uint64_t)(c->qt - c->qh));
    for (uint64_t i = 0; i < wide; i++) {
        if (defer) {
            vt_wide_pending(-1);
            vt_defer_wide();
        } else {
            vt_wide_commit(vt_off_queued(), 1);
        }
    }
    c->qh = c->qt = c->hh = c->ht = 0;
    c->tx_wide = 0;
    c->in_multi = 0;
    c->tx_rejected = c->named = 0;
}

/* replies can no longer be matched with commands: from now on every reply waits for every AOF
 * byte queued when it is written, and the writes it sends stay keyspace-wide for a while */
void vt_conn_unsync(struct conn *c)
{
    if (c->unsynced)
        return;
    vt_conn_settle_all(c, 1);
    c->unsynced = 1;
    vt_stat_add(&vt_off.stats->unsynced_conns, 1);
}

/* -- the bound's questions (offload_conn.h) ------------------------------------------------- */

int vt_conn_may_hold(int fd)
{
    struct conn *c = vt_conn_get(fd);
    int may;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    may = c->held_n || c->qt != c->qh || (c->named && !c->rejecting);
    pthread_mutex_unlock(&c->mu);
    return may;
}

uint64_t vt_conn_bulk_left(int fd)
{
    struct conn *c = vt_conn_get(fd);
    return c ? vt_req_bulk_left(&c->rp) : 0; /* the thread that reads fd is the one that feeds its parser */
}

/* -- requests ------------------------------------------------------------------------------- */

static int proto_of(const char *n, size_t len)
{
    static const struct { const char *name; int proto; } P[] = {
        {"multi", P_MULTI}, {"exec", P_EXEC}, {"discard", P_DISCARD}, {"subscribe", P_UNSYNC},
        {"psubscribe", P_UNSYNC}, {"ssubscribe", P_UNSYNC}, {"monitor", P_UNSYNC}, {"sync", P_REPLICA},
        {"psync", P_REPLICA}, {"client", P_CLIENT}, {"shutdown", P_SHUTDOWN}, {NULL, 0}};
    for (int i = 0; P[i].name; i++)
        if (strlen(P[i].name) == len && strncasecmp(P[i].name, n, len) == 0)
            return P[i].proto;
    return P_NONE;
}

/* --offload-overflow reject: a write parsed over the bound is renamed in the server's read buffer (its
 * name's last byte: "SET" to "SE#", that byte always in the buffer being parsed, however the name was split
 * across reads), so the server answers "unknown command" and runs nothing; inside MULTI, the server then
 * aborts the EXEC. Let through: a replica's link, an inline command (its words are not located) */
static void reject(struct conn *c)
{
    char *last = c->rbuf ? vt_req_arg_last(&c->rp) : NULL;
    if (!last || !c->known || !(c->ci.flags & VT_CMD_F_WRITE) || c->replica || !vt_bound_reject_write())
        return;
    *last = '#';
    c->rejecting = 1;
    c->known = 0;
}

static uint64_t digits(uint64_t v)
{
    uint64_t n = 1;
    while (v >= 10)
        v /= 10, n++;
    return n;
}

static void cb_begin(void *ctx, int64_t argc)
{
    struct conn *c = ctx;
    c->argc = argc;
    c->rejecting = 0;
    c->proto = P_NONE;
    c->known = 0;
    c->sub_wanted = 0;
    c->nh = 0;
    c->named = 0;
    c->req_bytes = argc > 0 ? 3 + digits((uint64_t)argc) : 0; /* "*N\r\n" */
}

static void cb_arg(void *ctx, int64_t i, uint64_t len, uint64_t h, const char *p, size_t plen)
{
    struct conn *c = ctx;
    const struct vt_cmdinfo *ci = &c->ci;
    if (c->req_bytes)
        c->req_bytes += 5 + digits(len) + len; /* "$L\r\n" data "\r\n" */
    if (i == 0) {
        c->named = 1;
        c->nlen = len == plen && plen < VT_CMD_NAME ? plen : 0;
        memcpy(c->name, p, c->nlen);
        c->proto = c->nlen ? proto_of(p, plen) : P_NONE;
        c->known = c->nlen && vt_cmds_lookup(p, plen, &c->ci);
        c->sub_wanted = c->argc > 1 && ((c->known && (ci->flags & VT_CMD_F_CONTAINER)) || c->proto == P_CLIENT);
        reject(c);
        return;
    }
    if (c->rejecting)
        return; /* renamed: the server runs nothing, its keys are not pending */
    if (c->proto == P_SHUTDOWN && len == 5 && plen == 5 && strncasecmp(p, "abort", 5) == 0)
        c->proto = P_SHUTDOWN_ABORT; /* SHUTDOWN ... ABORT: a pending shutdown called off (cb_end) */
    if (i == 1 && c->sub_wanted) { /* a container's subcommand: "client|reply", "object|encoding" */
        c->sub_wanted = 0;
        if (c->proto == P_CLIENT && len == 5 && strncasecmp(p, "reply", 5) == 0)
            c->proto = P_UNSYNC; /* CLIENT REPLY OFF/SKIP: replies no longer match commands */
        if (c->known && (ci->flags & VT_CMD_F_CONTAINER)) {
            char full[VT_CMD_NAME];
            size_t n = c->nlen + 1 + plen;
            c->known = len == plen && n < VT_CMD_NAME;
            if (c->known) {
                memcpy(full, c->name, c->nlen);
                full[c->nlen] = '|';
                memcpy(full + c->nlen + 1, p, plen);
                c->known = vt_cmds_lookup(full, n, &c->ci);
            }
        }
        return;
    }
    uint64_t f = len <= WIT_ARG_MAX ? H_WIT : 0;
    if (c->unsynced || !c->known) {
        /* out of sync, or unknown: no key of its own (it is keyspace-wide) */
    } else if (ci->flags & VT_CMD_F_WRITE) {
        int key;
        if (ci->flags & VT_CMD_F_NOKEYS)
            key = 0;
        else if (ci->first > 0 && !(ci->flags & VT_CMD_F_MOVABLE)) {
            int64_t last = ci->last < 0 ? c->argc + ci->last : ci->last;
            key = i >= ci->first && i <= last && (i - ci->first) % ci->step == 0;
        } else
            key = 1; /* keys anywhere: every argument counts as one */
        if (key)
            f |= (ci->flags & VT_CMD_F_BLOCKING) ? H_COMMIT : H_PEND;
    } else if (!(ci->flags & (VT_CMD_F_DURABILITY | VT_CMD_F_WIDE_READ))) {
        f |= H_READ;
    }
    if (!f)
        return;
    /* pending only once its hash is queued: a hash that could not be queued is never settled */
    if (push_hash(c, (h & ~H_FLAGS) | f) && (f & H_PEND))
        vt_keys_pending(h & ~H_FLAGS, 1);
}

/* DISCARD, or EXEC of a transaction the server aborts: nothing queued runs, what it made pending is dropped */
static void tx_drop(struct conn *c)
{
    for (uint32_t i = c->tx_start; i < c->ht; i++)
        if (c->hv[i] & H_PEND)
            vt_keys_pending(c->hv[i], -1);
    for (uint32_t i = 0; i < c->tx_wide; i++)
        vt_wide_pending(-1);
    c->ht = c->tx_start;
    c->in_multi = c->tx_rejected = 0;
    c->tx_wide = 0;
    push_entry(c, E_OTHER, 0, 0, 0);
}

static void cb_end(void *ctx)
{
    struct conn *c = ctx;
    const struct vt_cmdinfo *ci = &c->ci;
    int kind, wide = 0;
    vt_stat_add(&vt_off.stats->commands, 1);
    vt_bound_request_size(c->req_bytes);
    c->named = 0;
    if (c->rejecting) { /* its reply is the server's error: nothing to wait for */
        vt_stat_add(&vt_off.stats->rejected_writes, 1);
        c->tx_rejected |= c->in_multi;
        push_entry(c, E_OTHER, 0, 0, c->nh);
        return;
    }
    if (c->proto == P_SHUTDOWN_ABORT)
        vt_offload_shutdown_aborted();
    if (c->proto == P_UNSYNC || c->proto == P_REPLICA) {
        /* a replica's link carries the replication stream, not replies: unsynced, every byte written
         * to it waits for every AOF byte queued before it (#3381 caps the stream at the durable offset) */
        if (c->proto == P_REPLICA && !c->replica) {
            c->replica = 1;
            vt_stat_add(&vt_off.stats->replica_links, 1);
        }
        vt_conn_unsync(c);
        return;
    }
    if (c->proto == P_MULTI && !c->in_multi) {
        c->in_multi = 1;
        c->tx_start = c->ht;
        c->tx_write = c->tx_wide_read = c->tx_rejected = 0;
        c->tx_wide = 0;
        push_entry(c, E_OTHER, 0, 0, c->nh);
        return;
    }
    if (c->proto == P_EXEC && c->in_multi && c->tx_rejected) { /* EXECABORT: nothing queued runs */
        tx_drop(c);
        return;
    }
    if (c->proto == P_EXEC && c->in_multi) {
        uint32_t nh = c->ht - c->tx_start;
        kind = c->tx_write ? E_WRITE : c->tx_wide_read ? E_WIDE_READ : nh ? E_READ : E_OTHER;
        c->in_multi = 0;
        push_entry(c, kind, 0, c->tx_wide, nh);
        c->tx_wide = 0;
        if (kind == E_WRITE)
            vt_stat_add(&vt_off.stats->write_commands, 1);
        return;
    }
    if (c->proto == P_DISCARD && c->in_multi) {
        tx_drop(c);
        return;
    }
    if (c->proto == P_EXEC || c->proto == P_DISCARD || c->proto == P_MULTI) {
        kind = E_OTHER; /* outside a transaction (or MULTI inside one): an error reply */
    } else if (!c->known || c->argc < 0 || c->unsynced) {
        int reads = c->known && !(ci->flags & (VT_CMD_F_WRITE | VT_CMD_F_DURABILITY)) &&
                    (ci->first > 0 || !(ci->flags & VT_CMD_F_NOKEYS));
        kind = !c->known || (ci->flags & (VT_CMD_F_WRITE | VT_CMD_F_DURABILITY)) ? E_WRITE
               : reads ? E_WIDE_READ : E_OTHER; /* an inline command's keys are not split */
        wide = kind == E_WRITE;
        if (!c->known)
            vt_stat_add(&vt_off.stats->unknown_commands, 1);
    } else if (ci->flags & VT_CMD_F_WRITE) {
        kind = E_WRITE;
        wide = (ci->flags & VT_CMD_F_NOKEYS) != 0;
    } else if (ci->flags & VT_CMD_F_DURABILITY) {
        kind = E_WRITE;
    } else if (ci->flags & VT_CMD_F_WIDE_READ) {
        kind = E_WIDE_READ;
    } else {
        kind = c->nh ? E_READ : E_OTHER;
    }
    if (kind == E_WRITE && !c->in_multi)
        vt_stat_add(&vt_off.stats->write_commands, 1);
    if (c->unsynced) {
        if (kind == E_WRITE)
            vt_defer_wide();
        return;
    }
    if (wide)
        vt_wide_pending(1);
    if (c->in_multi) { /* queued: its reply is +QUEUED, its effect EXEC's */
        c->tx_write |= kind == E_WRITE;
        c->tx_wide_read |= kind == E_WIDE_READ;
        c->tx_wide += (uint32_t)wide;
        push_entry(c, E_OTHER, 0, 0, 0);
        return;
    }
    /* BLPOP, WAIT, WAITAOF: blocked until another client's write (or a replica) releases them: not counted */
    push_entry(c, kind, c->known && (ci->flags & (VT_CMD_F_BLOCKING | VT_CMD_F_DURABILITY)), (uint32_t)wide, c->nh);
}

static void cb_error(void *ctx) { vt_conn_unsync((struct conn *)ctx); }

const struct vt_req_cb vt_conn_req_cb = {cb_begin, cb_arg, cb_end, cb_error};

