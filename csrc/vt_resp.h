/*
 * vt_resp.h: streaming RESP parsers for the virtual offload. Pure: no I/O, no allocation, no
 * global state; any split of the bytes gives the same events (tests/csrc/resp_fuzz.c checks it
 * under ASan/UBSan).
 *
 * Request parser: what a client sends (multibulk "*N\r\n$L\r\n..." or an inline line), as the
 * server reads it (the CRLF after a bulk is skipped, not checked, as valkey does). Each argument
 * is reported once its bytes are all read (a bulk's CRLF may follow in the next buffer): its index, length,
 * 64-bit FNV-1a hash and first VT_ARG_PREFIX bytes.
 * The AOF is the same protocol (multibulk only).
 *
 * Reply framer: what the server writes back (RESP2 and RESP3). It reports where each top-level
 * reply starts; a RESP3 push (">") is not a reply, an attribute ("|") belongs to the reply after it.
 */
#ifndef VT_RESP_H
#define VT_RESP_H

#include <stddef.h>
#include <stdint.h>

#define VT_ARG_PREFIX 48
#define VT_RESP_MAX_DEPTH 32
#define VT_INLINE_MAX (64 * 1024) /* valkey's PROTO_INLINE_MAX_SIZE */
#define VT_BULK_MAX (1ll << 40)  /* beyond any proto-max-bulk-len a server accepts */
#define VT_MULTIBULK_MAX (1ll << 31)

static inline uint64_t vt_fnv_init(void) { return 0xcbf29ce484222325ull; }
static inline uint64_t vt_fnv_add(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct vt_req_cb {
    /* a command of argc arguments begins; argc < 0: an inline command the parser cannot split
     * exactly (quotes): no argument follows, treat it as unknown */
    void (*begin)(void *ctx, int64_t argc);
    void (*arg)(void *ctx, int64_t index, uint64_t len, uint64_t hash, const char *prefix, size_t plen);
    void (*end)(void *ctx);
    void (*error)(void *ctx); /* a protocol error: nothing after it can be parsed */
};

struct vt_req_parser {
    int state;
    int inline_ok;      /* requests: inline commands allowed; the AOF: multibulk only */
    int64_t num;        /* the number being read */
    int num_digits, num_neg;
    int64_t argc, argi; /* the command's argument count, the argument being read */
    int64_t left;       /* bytes of the bulk still to read */
    uint64_t hash, len;
    size_t plen;
    char prefix[VT_ARG_PREFIX];
    size_t line_len;    /* inline: bytes of the line so far */
    int line_quoted;
    int64_t line_args;
    unsigned errors; /* protocol errors so far (survives vt_req_init) */
    const char *arg_at; /* the bulk argument being read, where it began in the buffer being fed (NULL: before it) */
    const char *arg_end; /* one past its last byte, when that byte is in the buffer being fed (else NULL) */
};

void vt_req_init(struct vt_req_parser *p, int inline_ok);
/* Feed n bytes; events go to cb with ctx. An error ends the feed (the rest of buf is ignored),
 * and every later one unless the error callback starts the parser again with vt_req_init. */
void vt_req_feed(struct vt_req_parser *p, const char *buf, size_t n, const struct vt_req_cb *cb, void *ctx);
/* inside an arg callback: where the argument's bytes are in the buffer being fed, when all of them are
 * in it (NULL otherwise): the buffer's own memory (a caller that fed a writable buffer may change them) */
char *vt_req_arg_at(const struct vt_req_parser *p);
/* inside an arg callback: its last byte in the buffer being fed (a bulk argument is reported as that byte is
 * read, before the CRLF after it: the byte is always there), NULL for an empty or inline one */
char *vt_req_arg_last(const struct vt_req_parser *p);
/* bytes of the bulk argument being read still to come (0: none begun) */
uint64_t vt_req_bulk_left(const struct vt_req_parser *p);

struct vt_reply_framer {
    int state;
    char type;
    int64_t num;
    int num_digits, num_neg;
    int64_t skip;        /* bulk payload + CRLF still to skip */
    int depth;           /* open aggregates */
    int64_t remain[VT_RESP_MAX_DEPTH];
    int in_push;         /* the top-level value being framed is a push: not a reply */
    int after_attr;      /* a top-level attribute was framed: the next value is its reply (already reported) */
    int error;
};

void vt_reply_init(struct vt_reply_framer *f);
/* Feed n bytes; start(ctx, off) at the first byte of each top-level reply (off within buf).
 * Returns -1 once the stream cannot be framed (then nothing more is reported), else 0. */
int vt_reply_feed(struct vt_reply_framer *f, const char *buf, size_t n, void (*start)(void *ctx, size_t off),
                  void *ctx);
/* 1 when the framer sits between top-level values (a reply boundary) */
int vt_reply_at_boundary(const struct vt_reply_framer *f);

#endif
