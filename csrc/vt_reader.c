/*
 * vt_reader.c: the replica readers (vt_reader.h).
 */
#define _GNU_SOURCE
#include "vt_reader.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int vt_reader_open(struct vt_reader *r, int ep, const char *host, int port, int n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return EINVAL;
    r->c = calloc((size_t)n, sizeof(*r->c));
    if (!r->c)
        return ENOMEM;
    for (r->n = 0; r->n < n; r->n++) { /* blocking connect: before the window, on loopback */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return errno;
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
            int e = errno;
            close(fd);
            return e;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = VT_READER_TAG | (uint32_t)r->n};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            int e = errno;
            close(fd);
            return e;
        }
        r->c[r->n].fd = fd;
    }
    return 0;
}

static void send_get(struct vt_reader *r, struct vt_reader_conn *c, uint32_t key, uint64_t now)
{
    char req[64];
    int len = snprintf(req, sizeof(req), "*2\r\n$3\r\nGET\r\n$16\r\nkey:%012u\r\n", (unsigned)key);
    if (send(c->fd, req, (size_t)len, MSG_NOSIGNAL) != len)
        return; /* a GET is 38 bytes: a socket that takes none of them is closing; its read shows it */
    c->sent = c->last = now;
    c->key = key;
}

void vt_reader_kick(struct vt_reader *r, uint32_t key, uint64_t now)
{
    if (now >= r->we)
        return;
    for (int i = 0; i < r->n; i++)
        if (!r->c[i].sent && now >= r->c[i].last + VT_READER_GAP_NS)
            send_get(r, &r->c[i], key, now);
}

static uint64_t sequence(const char *h, uint32_t n)
{
    uint64_t v = 0;
    if (n < 16)
        return 0;
    for (int i = 0; i < 16; i++) {
        char ch = h[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return 0; /* not a kept SET's value (the fill's): no sequence */
        v = v << 4 | (uint64_t)d;
    }
    return v;
}

static void done(struct vt_reader *r, struct vt_reader_conn *c, uint64_t now)
{
    uint64_t seq = c->reply.kind == '$' && c->reply.num >= 0 ? sequence(c->head, c->head_n) : 0;
    if (seq && r->seen && c->key < r->keyspace && seq > r->seen[c->key])
        r->seen[c->key] = seq;
    if (c->sent >= r->ws && c->sent < r->we) {
        struct vt_reader_stats *st = r->st;
        st->reads++;
        st->misses += c->reply.kind == '$' && c->reply.num < 0;
        vt_hist_record(&st->latency, now - c->sent);
        if (!st->log_stride)
            st->log_stride = 1;
        if (seq && r->log && r->log_cap >= 2 && st->with_seq++ % st->log_stride == 0) {
            if (st->logged == r->log_cap) { /* full: every other entry kept, the stride doubled (a uniform sample) */
                for (uint64_t j = 0; j < st->logged / 2; j++)
                    memmove(r->log + 3 * j, r->log + 6 * j, 3 * sizeof(uint64_t));
                st->logged /= 2;
                st->log_stride *= 2;
            }
            uint64_t *e = r->log + 3 * st->logged++;
            e[0] = seq, e[1] = c->sent, e[2] = now;
        }
    }
    c->sent = 0;
    c->head_n = 0;
}

/* a bulk's data as it comes: its first 16 bytes kept (the value's sequence) */
static void keep_head(void *ctx, const char *p, size_t n)
{
    struct vt_reader_conn *c = ctx;
    for (size_t j = 0; j < n && c->head_n < sizeof(c->head); j++)
        c->head[c->head_n++] = p[j];
}

int vt_reader_input(struct vt_reader *r, uint32_t i, const char *buf, long n, uint64_t now)
{
    struct vt_reader_conn *c = &r->c[i];
    for (size_t k = 0; vt_reply_next(&c->reply, buf, (size_t)n, &k, keep_head, c);)
        done(r, c, now);
    return 0;
}

void vt_reader_close(struct vt_reader *r)
{
    for (int i = 0; i < r->n; i++)
        close(r->c[i].fd);
    free(r->c);
    r->c = NULL;
    r->n = 0;
}
