/*
 * valkeytrace's open-loop client (csrc/vt_load.c) under ASan + UBSan, against a small RESP server on a
 * thread of its own (each request answered "+OK" after a pause the test sets): every request due in
 * the window is answered, nothing is reported by the sanitizers, and the per-connection request queue
 * stays bounded by what is in flight, not by what was ever sent (the largest queue allocation seen,
 * counted by wrapping realloc: 24 B per request ever sent would pass it after the first second).
 * Prints "ok ..." and exits 0, or says what failed and exits 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#define PENDING_B 48    /* sizeof(struct pending) in vt_load.c */
static size_t largest_q;   /* the largest realloc of a pending-request queue */
static void *track_realloc(void *p, size_t n)
{
    if (n % PENDING_B == 0 && n > largest_q && n < ((size_t)1 << 34))
        largest_q = n;
    return realloc(p, n);
}
#define realloc track_realloc /* the queues grow in vt_grow (csrc/vt_grow.h: included here first, then guarded) */
#include "../../csrc/vt_grow.h"
#include "../../csrc/vt_arrivals.c"
#undef realloc
#include "../../csrc/vt_load.c"
#include "../../csrc/vt_reader.c"
#include "../../csrc/vt_inflight.c"

static int listen_fd, pause_us;

static void *serve_one(void *arg)
{
    int fd = (int)(long)arg;
    char buf[4096];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        int reqs = 0;
        for (ssize_t i = 0; i < n; i++)
            reqs += buf[i] == '*'; /* one request per '*' (the harness's values hold none) */
        if (pause_us)
            usleep((useconds_t)pause_us);
        for (int i = 0; i < reqs; i++)
            if (write(fd, "+OK\r\n", 5) != 5)
                break;
    }
    close(fd);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t t;
        pthread_create(&t, NULL, serve_one, (void *)(long)fd);
        pthread_detach(t);
    }
}

static uint64_t *acked; /* NULL, or keyspace (1000) entries: SETs' sequences kept */

static int run(int port, double rate, double seconds, int conns, int max_conns, int hold, struct vt_load_result *r)
{
    struct vt_load_config c = {.acked = acked, .host = "127.0.0.1", .port = port, .op = VT_LOAD_SET, .keyspace = 1000,
                               .value_size = 16, .rate = rate, .arrival = VT_LOAD_POISSON, .conns = conns,
                               .max_conns = max_conns, .hold = hold, .warmup_ns = 100000000ull,
                               .duration_ns = (uint64_t)(seconds * 1e9), .grace_ns = 2000000000ull,
                               .drain_ns = 2000000000ull, .late_ns = 1000000000ull, .seed = 7, .marker_fd = -1};
    return vt_load_run(&c, r);
}

int main(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t len = sizeof(a);
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) || listen(listen_fd, 512) ||
        getsockname(listen_fd, (struct sockaddr *)&a, &len)) {
        printf("cannot listen\n");
        return 1;
    }
    int port = ntohs(a.sin_port);
    pthread_t t;
    pthread_create(&t, NULL, acceptor, NULL);
    struct vt_load_result r;
    /* 1. a fixed pool of 8, one in flight each: 30,000 requests over 1.5 s, every one answered */
    if (run(port, 20000, 1.5, 8, 8, 1, &r) || r.answered < r.due || r.errors) {
        printf("fixed pool: error %d (%s), due %llu answered %llu errors %llu\n", r.error, r.message,
               (unsigned long long)r.due, (unsigned long long)r.answered, (unsigned long long)r.errors);
        return 1;
    }
    size_t fixed = largest_q;
    /* 2. two connections, pipelined, a server that pauses 2 ms per read: queues build and drain; the
     * queue's largest allocation stays at what was in flight (pipelined at most ~rate x pause per read) */
    largest_q = 0;
    pause_us = 2000;
    if (run(port, 20000, 2.0, 2, 2, 0, &r) || r.answered < r.due) {
        printf("pipelined: error %d (%s), due %llu answered %llu\n", r.error, r.message, (unsigned long long)r.due,
               (unsigned long long)r.answered);
        return 1;
    }
    size_t ever = (size_t)(r.sent / 2) * PENDING_B; /* a connection's share of every request sent, as the old queue kept */
    if (!largest_q || largest_q * 4 > ever) { /* 0: the witness saw no queue grow at all (it is blind) */
        printf("the request queue grew to %zu B for %llu requests sent (%zu B if it kept each)\n", largest_q,
               (unsigned long long)r.sent, ever);
        return 1;
    }
    /* 3. acknowledged SETs kept (--verify-durability): every +OK counted, each key's latest sequence kept */
    uint64_t keys[1000] = {0};
    acked = keys;
    pause_us = 0;
    if (run(port, 5000, 0.5, 4, 4, 1, &r) || r.acked < r.answered || r.rejected) {
        printf("acked: error %d (%s), answered %llu acked %llu\n", r.error, r.message, (unsigned long long)r.answered,
               (unsigned long long)r.acked);
        return 1;
    }
    int kept = 0;
    for (int i = 0; i < 1000; i++)
        kept += keys[i] > 0; /* a sequence: CLOCK_MONOTONIC's ns (plus an epoch of 0 here) */
    if (kept < 500) {
        printf("acked: only %d of 1000 keys have a sequence after %llu SETs\n", kept, (unsigned long long)r.acked);
        return 1;
    }
    acked = NULL;
    /* 4. nobody listening: a clear error, no crash */
    if (run(1, 1000, 0.2, 1, 1, 1, &r) == 0 || !r.error) {
        printf("no server: no error reported\n");
        return 1;
    }
    printf("ok fixed queue %zu B, pipelined queue %zu B of %zu B sent, refused: %s\n", fixed, largest_q, ever, r.message);
    close(listen_fd);
    return 0;
}
