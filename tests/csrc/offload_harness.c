/*
 * offload_harness.c: the virtual offload's threads under ThreadSanitizer (and ASan + UBSan):
 * the shim's sources linked into a small server that behaves as valkey does with appendfsync
 * always and I/O threads (tests/unit/test_native_sanitized.py builds and runs it, with
 * VALKEYTRACE_OFFLOAD=durable and an injected fdatasync delay).
 *
 * The main thread accepts CLIENTS connections and, each round, reads what they sent, appends one
 * AOF record per command (write + fdatasync: both taken by the offload), then hands the replies
 * to two "I/O threads" (a connection always to the same one, as valkey keeps a client's writes
 * in order). A SET's reply and a GET's reply carry the AOF offset that makes their key durable;
 * each client checks, when a reply arrives, that the AOF file already holds that many bytes: an
 * independent truth (the file), not the shim's counters. Clients GET their own keys and each
 * other's. At the end the offload's own witness must count 0 early replies, and every
 * connection is closed (the drain) before exit. Prints "ok <replies> <held>".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "offload.h"
#include "offload_state.h"
#include "vt_cmds.h"

#define CLIENTS 6
#define ROUNDS 150
#define KEYLEN 16

static char aof_path[256];
static int port, failures;
static uint64_t key_off[CLIENTS]; /* the AOF offset after each client's last SET record */

struct job {
    int fd, len;
    char data[64];
};
struct io_thread {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job q[CLIENTS * 4];
    int head, tail, stop;
    pthread_t t;
} io[2];

static void *io_main(void *arg)
{
    struct io_thread *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (t->head == t->tail && !t->stop)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->head == t->tail)
            break;
        struct job j = t->q[t->head++ % (CLIENTS * 4)];
        pthread_mutex_unlock(&t->mu);
        for (int off = 0; off < j.len;) { /* the server's socket is blocking here: no EAGAIN */
            ssize_t n = write(j.fd, j.data + off, (size_t)(j.len - off));
            if (n <= 0)
                break;
            off += (int)n;
        }
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void hand(int client, int fd, const char *s, int len)
{
    struct io_thread *t = &io[client % 2];
    pthread_mutex_lock(&t->mu);
    struct job *j = &t->q[t->tail++ % (CLIENTS * 4)];
    j->fd = fd;
    j->len = len;
    memcpy(j->data, s, (size_t)len);
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static int read_reply(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            return -1;
        n++;
        if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n') {
            if (buf[0] == '$' && n < 8) /* a bulk: its header, then the line with the data */
                continue;
            buf[n] = 0;
            return (int)n;
        }
    }
    return -1;
}

static void *client_main(void *arg)
{
    int me = (int)(intptr_t)arg, fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char cmd[128], reply[128];
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        return NULL;
    for (int r = 0; r < ROUNDS; r++) {
        int get = r % 3 == 2, who = get && r % 2 ? (me + 1) % CLIENTS : me;
        int n = get ? snprintf(cmd, sizeof(cmd), "*2\r\n$3\r\nGET\r\n$%d\r\nkey:%012d\r\n", KEYLEN, who)
                    : snprintf(cmd, sizeof(cmd), "*3\r\n$3\r\nSET\r\n$%d\r\nkey:%012d\r\n$1\r\nv\r\n", KEYLEN, me);
        if (write(fd, cmd, (size_t)n) != n || read_reply(fd, reply, sizeof(reply)) < 0)
            break;
        struct stat st;
        long long need = atoll(strchr(reply, '\n') && reply[0] == '$' ? strchr(reply, '\n') + 1 : reply + 1);
        if (stat(aof_path, &st) == 0 && st.st_size < need) {
            printf("client %d: a reply needing %lld AOF bytes came when the file held %lld\n", me, need,
                   (long long)st.st_size);
            __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
        }
    }
    close(fd);
    return NULL;
}

int main(void)
{
    static struct vt_offload_control ctl; /* what valkeytrace writes from the server's COMMAND */
    const struct { const char *name; uint32_t flags; } cmds[] = {{"set", VT_CMD_F_WRITE}, {"get", VT_CMD_F_READONLY}};
    for (int i = 0; i < 2; i++) {
        strcpy(ctl.entries[i].name, cmds[i].name);
        ctl.entries[i].flags = cmds[i].flags;
        ctl.entries[i].first = ctl.entries[i].step = 1;
        ctl.entries[i].last_plus = 1 + 0x8000;
    }
    ctl.nentries = 2;
    __atomic_store_n(&ctl.table_ready, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&vt_off.mu);
    vt_off.control = &ctl;
    vt_cmds_attach(&ctl, vt_off.stats);
    pthread_mutex_unlock(&vt_off.mu);

    char dir[] = "/tmp/vt-harness-XXXXXX";
    if (!mkdtemp(dir))
        return 2;
    snprintf(aof_path, sizeof(aof_path), "%s/appendonly.aof.1.incr.aof", dir);
    int aof = open(aof_path, O_WRONLY | O_APPEND | O_CREAT, 0600), lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (aof < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 16) || getsockname(lfd, (struct sockaddr *)&a, &alen))
        return 2;
    port = ntohs(a.sin_port);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_init(&io[i].mu, NULL);
        pthread_cond_init(&io[i].cv, NULL);
        pthread_create(&io[i].t, NULL, io_main, &io[i]);
    }
    pthread_t cl[CLIENTS];
    int fds[CLIENTS], open_n = CLIENTS;
    char in[CLIENTS][256];
    int inlen[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        pthread_create(&cl[i], NULL, client_main, (void *)(intptr_t)i);
        fds[i] = accept(lfd, NULL, NULL); /* the shim follows it: a client connection */
        inlen[i] = 0;
    }
    uint64_t aof_size = 0, active_ns = vt_now_ns();
    while (open_n) {
        struct pollfd p[CLIENTS];
        for (int i = 0; i < CLIENTS; i++)
            p[i] = (struct pollfd){fds[i], POLLIN, 0};
        int ready = poll(p, CLIENTS, vt_offload_before_wait(1000)); /* as valkey's epoll_wait: main-write's due write */
        if (ready < 0 || (ready == 0 && vt_now_ns() - active_ns > 1000000000ull))
            break; /* a second with nothing to read: stuck */
        if (ready > 0)
            active_ns = vt_now_ns();
        char replies[CLIENTS][64];
        int rlen[CLIENTS] = {0}, any = 0;
        for (int i = 0; i < CLIENTS; i++) {
            if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
                continue;
            ssize_t n = read(fds[i], in[i] + inlen[i], sizeof(in[i]) - (size_t)inlen[i]);
            if (n <= 0) {
                close(fds[i]); /* the drain: what it holds leaves first */
                fds[i] = -1;
                open_n--;
                continue;
            }
            inlen[i] += (int)n;
            char *end = memmem(in[i], (size_t)inlen[i], "key:", 4);
            int setcmd = inlen[i] > 10 && in[i][1] == '3';
            size_t need = setcmd ? 43 : 36; /* the whole command */
            if (!end || (size_t)inlen[i] < need)
                continue;
            int key = atoi(end + 4);
            if (setcmd) { /* executed: its AOF record, then (below) the flush */
                if (write(aof, in[i], need) != (ssize_t)need)
                    return 3;
                aof_size += need;
                key_off[key] = aof_size;
                rlen[i] = snprintf(replies[i], 64, "+%llu\r\n", (unsigned long long)aof_size);
            } else {
                char v[32];
                int vn = snprintf(v, sizeof(v), "%llu", (unsigned long long)key_off[key]);
                rlen[i] = snprintf(replies[i], 64, "$%d\r\n%s\r\n", vn, v);
            }
            inlen[i] = 0;
            any = 1;
        }
        if (any && fdatasync(aof) != 0) /* beforeSleep: the AOF before any reply */
            return 4;
        for (int i = 0; i < CLIENTS; i++)
            if (rlen[i])
                hand(i, fds[i], replies[i], rlen[i]);
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(cl[i], NULL);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&io[i].mu);
        io[i].stop = 1;
        pthread_cond_signal(&io[i].cv);
        pthread_mutex_unlock(&io[i].mu);
        pthread_join(io[i].t, NULL);
    }
    close(aof);
    struct vt_offload_stats *st = vt_off.stats;
    uint64_t early = __atomic_load_n(&st->early_replies, __ATOMIC_ACQUIRE), held = st->held_replies;
    if (failures || early || !held || st->jobs < 10) {
        printf("failures %d, early %llu, held %llu, jobs %llu\n", failures, (unsigned long long)early,
               (unsigned long long)held, (unsigned long long)st->jobs);
        return 1;
    }
    printf("ok %llu %llu\n", (unsigned long long)st->replies, (unsigned long long)held);
    unlink(aof_path);
    rmdir(dir);
    return 0;
}
