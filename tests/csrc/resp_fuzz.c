/*
 * resp_fuzz.c: the virtual offload's RESP parsers (csrc/vt_resp.c) against a generator that
 * knows the answer, under ASan + UBSan (tests/unit/test_native_sanitized.py builds and runs it).
 *
 * Requests: random multibulk and inline commands (binary arguments, CRLF inside them, empty and
 * large ones); every split of the stream in two, and random splits into many pieces, must report
 * exactly the events the generator expects (each argument's index, length, FNV hash and prefix).
 * Replies: random RESP2/RESP3 values (nested aggregates, pushes, attributes, nulls); every split
 * must report the start of each top-level reply where the generator put it. Garbage and huge
 * lengths must neither crash nor report anything after an error. Prints "ok N" on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt_resp.h"

#define CAP (1 << 20)
#define MAXEV 20000

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static unsigned pick(unsigned n) { return (unsigned)(next() % n); }

struct ev {
    int kind; /* 0 begin, 1 arg, 2 end, 3 error */
    int64_t a;
    uint64_t len, hash;
    size_t plen;
    char prefix[VT_ARG_PREFIX];
};
static struct ev got[MAXEV], want[MAXEV];
static int ngot, nwant, failures;

static void add(struct ev *v, int *n, struct ev e)
{
    if (*n < MAXEV)
        v[(*n)++] = e;
}
static void on_begin(void *c, int64_t argc) { add(got, &ngot, (struct ev){.kind = 0, .a = argc}); }
static void on_arg(void *c, int64_t i, uint64_t len, uint64_t h, const char *p, size_t plen)
{
    struct ev e = {.kind = 1, .a = i, .len = len, .hash = h, .plen = plen};
    if (plen > VT_ARG_PREFIX)
        abort();
    memcpy(e.prefix, p, plen);
    add(got, &ngot, e);
}
static void on_end(void *c) { add(got, &ngot, (struct ev){.kind = 2}); }
static void on_error(void *c) { add(got, &ngot, (struct ev){.kind = 3}); }
static const struct vt_req_cb CB = {on_begin, on_arg, on_end, on_error};

static char buf[CAP];
static size_t blen;

static void put(const char *s, size_t n)
{
    memcpy(buf + blen, s, n);
    blen += n;
}

static void expect_arg(int64_t i, const char *s, size_t n)
{
    struct ev e = {.kind = 1, .a = i, .len = n, .hash = vt_fnv_add(vt_fnv_init(), s, n)};
    e.plen = n < VT_ARG_PREFIX ? n : VT_ARG_PREFIX;
    memcpy(e.prefix, s, e.plen);
    add(want, &nwant, e);
}

static void gen_request(void)
{
    char arg[70000], head[64];
    if (pick(5) == 0) { /* inline: only the name is reported */
        size_t n = 1 + pick(8);
        for (size_t k = 0; k < n; k++)
            arg[k] = (char)('a' + pick(26));
        if (pick(3) == 0)
            put("  ", 2);
        put(arg, n);
        add(want, &nwant, (struct ev){.kind = 0, .a = -1});
        expect_arg(0, arg, n);
        put(" key:1 \"quoted arg\"\r\n", 21);
        add(want, &nwant, (struct ev){.kind = 2});
        if (pick(4) == 0)
            put("\r\n", 2); /* a blank line: no command */
        return;
    }
    if (pick(10) == 0)
        put("*0\r\n", 4); /* no command */
    int argc = 1 + (int)pick(6);
    put(head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc));
    add(want, &nwant, (struct ev){.kind = 0, .a = argc});
    for (int i = 0; i < argc; i++) {
        size_t n = pick(20) == 0 ? 1000 + pick(65000) : pick(60);
        for (size_t k = 0; k < n; k++)
            arg[k] = pick(8) == 0 ? (pick(2) ? '\r' : '\n') : (char)pick(256);
        put(head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n", n));
        put(arg, n);
        put("\r\n", 2);
        expect_arg(i, arg, n);
    }
    add(want, &nwant, (struct ev){.kind = 2});
}

static int same(void)
{
    if (ngot != nwant)
        return 0;
    for (int i = 0; i < ngot; i++) {
        struct ev *a = &got[i], *b = &want[i];
        if (a->kind != b->kind || a->a != b->a || a->len != b->len || a->hash != b->hash || a->plen != b->plen ||
            memcmp(a->prefix, b->prefix, a->plen))
            return 0;
    }
    return 1;
}

static void feed_split(size_t *cuts, int ncuts)
{
    struct vt_req_parser p;
    size_t from = 0;
    vt_req_init(&p, 1);
    ngot = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : blen;
        vt_req_feed(&p, buf + from, to - from, &CB, NULL);
        from = to;
    }
}

static void requests(void)
{
    for (int round = 0; round < 40; round++) {
        blen = 0;
        nwant = 0;
        int cmds = 1 + (int)pick(4);
        for (int i = 0; i < cmds; i++)
            gen_request();
        feed_split(NULL, 0);
        if (!same())
            printf("requests: whole stream, round %d: %d events, expected %d\n", round, ngot, nwant), failures++;
        size_t step = blen > 4000 ? blen / 4000 : 1; /* every byte of small streams, a sample of big ones */
        for (size_t k = 0; k <= blen; k += step) {
            feed_split(&k, 1);
            if (!same()) {
                printf("requests: split at %zu of %zu differs\n", k, blen), failures++;
                break;
            }
        }
        size_t cuts[64];
        int n = 1 + (int)pick(63);
        for (int i = 0; i < n; i++)
            cuts[i] = pick((unsigned)blen + 1);
        for (int i = 1; i < n; i++) /* sorted */
            for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                size_t t = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        feed_split(cuts, n);
        if (!same())
            printf("requests: %d random splits differ\n", n), failures++;
    }
}

static void noop_start(void *c, size_t off) {}

/* the AOF's parser starts again after an error (csrc/offload.c): a feed must still end */
static struct vt_req_parser restarting;
static void restart(void *c) { vt_req_init(&restarting, 0); }
static const struct vt_req_cb RESTART_CB = {on_begin, on_arg, on_end, restart};

static void garbage(void)
{
    struct vt_req_parser p;
    struct vt_reply_framer f;
    for (int round = 0; round < 2000; round++) {
        blen = 1 + pick(600);
        for (size_t k = 0; k < blen; k++)
            buf[k] = pick(3) ? "*$\r\n0123456789-+:>|%~_#,!=( ab"[pick(30)] : (char)pick(256);
        vt_req_init(&p, pick(2));
        ngot = 0;
        for (size_t k = 0; k < blen;) {
            size_t n = 1 + pick(40);
            n = n > blen - k ? blen - k : n;
            vt_req_feed(&p, buf + k, n, &CB, NULL);
            k += n;
        }
        for (int i = 0; i < ngot; i++)
            if (got[i].kind == 3 && i != ngot - 1)
                printf("garbage: events after an error\n"), failures++;
        vt_req_init(&restarting, 0);
        for (size_t k = 0; k < blen; k += 7)
            vt_req_feed(&restarting, buf + k, blen - k < 7 ? blen - k : 7, &RESTART_CB, NULL);
        vt_reply_init(&f);
        vt_reply_feed(&f, buf, blen, noop_start, NULL);
    }
    /* lengths beyond anything a server takes: refused; within: skipped without a copy */
    const char *huge[] = {"*2\r\n$3\r\nSET\r\n$1099511627777\r\nxx", "*99999999999\r\n", "$5\r\nhello\r\n",
                          "*1\r\n$-1\r\n", "*2\r\n$3\r\nGET\r\n$1099511627775\r\nabc"};
    for (size_t i = 0; i < sizeof(huge) / sizeof(*huge); i++) {
        vt_req_init(&p, 0);
        ngot = 0;
        vt_req_feed(&p, huge[i], strlen(huge[i]), &CB, NULL);
        int err = ngot && got[ngot - 1].kind == 3;
        if (i < 4 && !err)
            printf("huge %zu: not refused\n", i), failures++;
        if (i == 4 && (err || ngot != 2))
            printf("huge %zu: %d events\n", i, ngot), failures++;
    }
}

/* -- replies -------------------------------------------------------------------------------- */

static size_t starts[MAXEV], wstarts[MAXEV];
static int nstarts, nwstarts;
static void on_start(void *c, size_t off) { starts[nstarts++] = *(size_t *)c + off; }

static void gen_value(int depth)
{
    char head[64];
    const char *agg = "*~%>|", *line = "+-:,#_(", *bulk = "$=!";
    unsigned t = pick(depth < 4 ? 3 : 2);
    if (t == 0) {
        char c = line[pick(7)];
        put(&c, 1);
        if (c != '_')
            put("value 1\r", 8);
        put("\n", 1);
        if (c == '_')
            blen--, put("\r\n", 2);
    } else if (t == 1) {
        size_t n = pick(10) == 0 ? (size_t)-1 : pick(200);
        char c = bulk[pick(3)];
        if (n == (size_t)-1) {
            put(head, (size_t)snprintf(head, sizeof(head), "%c-1\r\n", c));
            return;
        }
        put(head, (size_t)snprintf(head, sizeof(head), "%c%zu\r\n", c, n));
        for (size_t k = 0; k < n; k++)
            buf[blen++] = (char)pick(256);
        put("\r\n", 2);
    } else {
        char c = agg[pick(depth ? 5 : 3)]; /* no push inside; attributes inside aggregates */
        if (c == '>')
            c = '*';
        int n = pick(8) == 0 && c != '|' ? -1 : (int)pick(4);
        put(head, (size_t)snprintf(head, sizeof(head), "%c%d\r\n", c, n));
        int elems = n < 0 ? 0 : (c == '%' || c == '|') ? 2 * n : n;
        for (int i = 0; i < elems; i++)
            gen_value(depth + 1);
        if (c == '|' && n >= 0)
            gen_value(depth + 1); /* an attribute is followed by the value it describes */
    }
}

static void replies(void)
{
    for (int round = 0; round < 300; round++) {
        blen = 0;
        nwstarts = 0;
        for (int v = 0, n = 1 + (int)pick(6); v < n; v++) {
            if (pick(5) == 0) { /* a push: not a reply */
                put(">2\r\n+message\r\n:1\r\n", 18);
                continue;
            }
            wstarts[nwstarts++] = blen;
            if (pick(6) == 0)
                put("|1\r\n+ttl\r\n:5\r\n", 14); /* an attribute: the reply begins here */
            gen_value(0);
        }
        for (size_t k = 0; k <= blen; k++) {
            struct vt_reply_framer f;
            size_t base = 0;
            vt_reply_init(&f);
            nstarts = 0;
            int rc = vt_reply_feed(&f, buf, k, on_start, &base);
            base = k;
            rc |= vt_reply_feed(&f, buf + k, blen - k, on_start, &base);
            if (rc || nstarts != nwstarts || memcmp(starts, wstarts, sizeof(size_t) * (size_t)nstarts) ||
                !vt_reply_at_boundary(&f)) {
                printf("replies: round %d, split at %zu: %d starts, expected %d (rc %d)\n", round, k, nstarts,
                       nwstarts, rc);
                failures++;
                break;
            }
        }
    }
}

int main(void)
{
    requests();
    garbage();
    replies();
    if (failures)
        return 1;
    printf("ok %d\n", 40 + 2000 + 300);
    return 0;
}
