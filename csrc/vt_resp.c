/*
 * vt_resp.c: the streaming RESP request parser and reply framer (vt_resp.h).
 */
#include "vt_resp.h"

#include <string.h>

enum { RQ_START, RQ_MB_NUM, RQ_MB_LF, RQ_DOLLAR, RQ_BULK_NUM, RQ_BULK_LF, RQ_BULK_DATA, RQ_BULK_CRLF,
       RQ_INLINE_SPACE, RQ_INLINE_WORD, RQ_INLINE_REST, RQ_ERROR };

void vt_req_init(struct vt_req_parser *p, int inline_ok)
{
    unsigned errors = p->errors; /* kept: a feed in progress sees that an error ended it */
    memset(p, 0, sizeof(*p));
    p->errors = errors;
    p->state = RQ_START;
    p->inline_ok = inline_ok;
}

static void fail(struct vt_req_parser *p, const struct vt_req_cb *cb, void *ctx)
{
    p->state = RQ_ERROR;
    p->errors++;
    if (cb->error)
        cb->error(ctx); /* it may start the parser again (the AOF's): this feed still ends here */
}

/* One digit (or the sign) of a length line; 0 when the character cannot belong to it */
static int num_char(struct vt_req_parser *p, char ch)
{
    if (ch == '-' && p->num_digits == 0 && !p->num_neg) {
        p->num_neg = 1;
        return 1;
    }
    if (ch < '0' || ch > '9' || p->num > (VT_BULK_MAX * 16))
        return 0;
    p->num = p->num * 10 + (ch - '0');
    p->num_digits++;
    return 1;
}

static void num_reset(struct vt_req_parser *p)
{
    p->num = 0;
    p->num_digits = 0;
    p->num_neg = 0;
}

static void arg_begin(struct vt_req_parser *p)
{
    p->hash = vt_fnv_init();
    p->len = 0;
    p->plen = 0;
}

static void arg_bytes(struct vt_req_parser *p, const char *s, size_t n)
{
    p->hash = vt_fnv_add(p->hash, s, n);
    p->len += n;
    if (p->plen < VT_ARG_PREFIX) {
        size_t k = VT_ARG_PREFIX - p->plen < n ? VT_ARG_PREFIX - p->plen : n;
        memcpy(p->prefix + p->plen, s, k);
        p->plen += k;
    }
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Inline commands ("SET k v\r\n"): the name is reported (argument 0), the rest is not split
 * (valkey splits it with quoting rules): begin(-1) tells the consumer the command is opaque. */
static size_t feed_inline(struct vt_req_parser *p, const char *b, size_t n, const struct vt_req_cb *cb, void *ctx)
{
    size_t i = 0;
    while (i < n) {
        char ch = b[i];
        if (++p->line_len > VT_INLINE_MAX) {
            fail(p, cb, ctx);
            return n;
        }
        if (ch == '\n') {
            if (p->state == RQ_INLINE_WORD)
                cb->arg(ctx, 0, p->len, p->hash, p->prefix, p->plen);
            if (p->state != RQ_INLINE_SPACE || p->line_args)
                cb->end(ctx);
            p->state = RQ_START;
            return i + 1;
        }
        if (p->state == RQ_INLINE_SPACE) {
            if (!is_space(ch)) {
                cb->begin(ctx, -1);
                p->line_args = 1;
                arg_begin(p);
                p->state = RQ_INLINE_WORD;
                continue; /* the same byte, as part of the word */
            }
        } else if (p->state == RQ_INLINE_WORD) {
            if (is_space(ch)) {
                cb->arg(ctx, 0, p->len, p->hash, p->prefix, p->plen);
                p->state = RQ_INLINE_REST;
            } else {
                arg_bytes(p, &ch, 1);
            }
        }
        i++;
    }
    return n;
}

/* One byte of a length line ("*N" or "$N"): a digit, or '\r' ending a number of at most max
 * (negative only when neg_ok), then state next. Returns the bytes consumed (0 on a failure that
 * stops the feed at this byte, as before). */
static size_t num_line(struct vt_req_parser *p, const struct vt_req_cb *cb, void *ctx, char ch, long long max,
                       int neg_ok, int next)
{
    if (++p->line_len > VT_INLINE_MAX) {
        fail(p, cb, ctx);
        return 0;
    }
    if (ch == '\r') {
        if (!p->num_digits || (p->num_neg && !neg_ok) || p->num > max)
            fail(p, cb, ctx);
        else
            p->state = next;
        return 1;
    }
    if (!num_char(p, ch)) {
        fail(p, cb, ctx);
        return 0;
    }
    return 1;
}

void vt_req_feed(struct vt_req_parser *p, const char *b, size_t n, const struct vt_req_cb *cb, void *ctx)
{
    size_t i = 0;
    unsigned errors = p->errors;
    p->arg_at = p->arg_end = NULL; /* a bulk begun in an earlier buffer has no place in this one */
    while (i < n && p->state != RQ_ERROR && p->errors == errors) {
        char ch = b[i];
        switch (p->state) {
        case RQ_START:
            if (ch == '*') {
                num_reset(p);
                p->line_len = 0;
                p->state = RQ_MB_NUM;
                i++;
            } else if (p->inline_ok) {
                p->state = RQ_INLINE_SPACE;
                p->line_len = 0;
                p->line_args = 0;
            } else {
                fail(p, cb, ctx);
            }
            break;
        case RQ_INLINE_SPACE:
        case RQ_INLINE_WORD:
        case RQ_INLINE_REST:
            i += feed_inline(p, b + i, n - i, cb, ctx);
            break;
        case RQ_MB_NUM: /* "*-1" is allowed: a null multibulk */
            i += num_line(p, cb, ctx, ch, VT_MULTIBULK_MAX, 1, RQ_MB_LF);
            break;
        case RQ_MB_LF: /* valkey skips the byte after '\r' unchecked */
            i++;
            if (p->num_neg || p->num == 0) {
                p->state = RQ_START; /* "*0" or "*-1": no command, no reply */
            } else {
                p->argc = p->num;
                p->argi = 0;
                cb->begin(ctx, p->argc);
                p->state = RQ_DOLLAR;
            }
            break;
        case RQ_DOLLAR:
            if (ch != '$') {
                fail(p, cb, ctx);
                break;
            }
            num_reset(p);
            p->line_len = 0;
            p->state = RQ_BULK_NUM;
            i++;
            break;
        case RQ_BULK_NUM:
            i += num_line(p, cb, ctx, ch, VT_BULK_MAX, 0, RQ_BULK_LF);
            break;
        case RQ_BULK_LF:
            i++;
            p->left = p->num;
            arg_begin(p);
            p->arg_at = b + i;
            p->arg_end = NULL; /* an empty argument has no last byte (vt_req_arg_last) */
            p->state = p->left ? RQ_BULK_DATA : RQ_BULK_CRLF;
            p->num = 2; /* CRLF bytes to skip after the data */
            if (!p->left) /* empty: complete now (no last byte) */
                cb->arg(ctx, p->argi, p->len, p->hash, p->prefix, p->plen);
            break;
        case RQ_BULK_DATA: {
            size_t k = (size_t)p->left < n - i ? (size_t)p->left : n - i;
            arg_bytes(p, b + i, k);
            p->left -= (int64_t)k;
            i += k;
            if (!p->left) { /* reported as its last byte is read: that byte is in this buffer (vt_req_arg_last) */
                p->state = RQ_BULK_CRLF;
                p->num = 2;
                p->arg_end = b + i;
                cb->arg(ctx, p->argi, p->len, p->hash, p->prefix, p->plen);
            }
            break;
        }
        case RQ_BULK_CRLF:
            i++;
            if (--p->num > 0)
                break;
            if (++p->argi == p->argc) {
                cb->end(ctx);
                p->state = RQ_START;
            } else {
                p->state = RQ_DOLLAR;
            }
            break;
        default:
            return;
        }
    }
}

/* -- replies -------------------------------------------------------------------------------- */

enum { F_TYPE, F_NUM, F_NUM_LF, F_LINE, F_SKIP, F_ERROR };

char *vt_req_arg_at(const struct vt_req_parser *p)
{
    return p->state == RQ_BULK_CRLF ? (char *)p->arg_at : NULL; /* an inline command's words: none */
}

uint64_t vt_req_bulk_left(const struct vt_req_parser *p)
{
    return p->state == RQ_BULK_DATA && p->left > 0 ? (uint64_t)p->left : 0;
}

char *vt_req_arg_last(const struct vt_req_parser *p)
{
    return p->state == RQ_BULK_CRLF && p->arg_end ? (char *)p->arg_end - 1 : NULL;
}

void vt_reply_init(struct vt_reply_framer *f)
{
    memset(f, 0, sizeof(*f));
    f->state = F_TYPE;
}

int vt_reply_at_boundary(const struct vt_reply_framer *f)
{
    return f->state == F_TYPE && f->depth == 0 && !f->after_attr && !f->error;
}

/* A value (scalar, or an aggregate just closed) is complete: count it in its parent, close
 * every aggregate this fills */
static void value_done(struct vt_reply_framer *f, int is_attr)
{
    for (;;) {
        if (f->depth == 0) {
            if (is_attr) {
                f->after_attr = 1;
            } else {
                f->after_attr = 0;
                f->in_push = 0;
            }
            return;
        }
        if (is_attr)
            return; /* an attribute inside an aggregate is not one of its elements */
        int64_t r = f->remain[f->depth - 1];
        int agg_attr = r < 0; /* an attribute aggregate's count is stored negated */
        int64_t left = (agg_attr ? -r : r) - 1;
        f->remain[f->depth - 1] = agg_attr ? -left : left;
        if (left > 0)
            return;
        f->depth--;
        is_attr = agg_attr;
    }
}

static void open_aggregate(struct vt_reply_framer *f, int64_t elements, int is_attr)
{
    if (elements <= 0) { /* "*0", "*-1", "%0": complete at once */
        value_done(f, is_attr);
        return;
    }
    if (f->depth >= VT_RESP_MAX_DEPTH) {
        f->state = F_ERROR;
        f->error = 1;
        return;
    }
    f->remain[f->depth++] = is_attr ? -elements : elements;
}

int vt_reply_feed(struct vt_reply_framer *f, const char *b, size_t n, void (*start)(void *ctx, size_t off), void *ctx)
{
    size_t i = 0;
    while (i < n) {
        char ch = b[i];
        switch (f->state) {
        case F_TYPE:
            if (f->depth == 0) {
                if (ch == '>')
                    f->in_push = 1;
                else if (!f->after_attr && !f->in_push)
                    start(ctx, i);
                else if (f->after_attr)
                    f->after_attr = (ch == '|'); /* a second attribute: still before the reply */
            }
            f->type = ch;
            switch (ch) {
            case '+': case '-': case ':': case ',': case '#': case '_': case '(':
                f->state = F_LINE;
                break;
            case '$': case '=': case '!': case '*': case '~': case '>': case '%': case '|':
                f->num = 0;
                f->num_digits = 0;
                f->num_neg = 0;
                f->state = F_NUM;
                break;
            default:
                f->state = F_ERROR;
                f->error = 1;
                return -1;
            }
            i++;
            break;
        case F_NUM:
            if (ch == '\r') {
                f->state = f->num_digits ? F_NUM_LF : F_ERROR;
            } else if (ch == '-' && !f->num_digits && !f->num_neg) {
                f->num_neg = 1;
            } else if (ch >= '0' && ch <= '9' && f->num < VT_BULK_MAX) {
                f->num = f->num * 10 + (ch - '0');
                f->num_digits++;
            } else {
                f->state = F_ERROR; /* streamed ("$?"), or garbage */
            }
            if (f->state == F_ERROR) {
                f->error = 1;
                return -1;
            }
            i++;
            break;
        case F_NUM_LF: {
            i++; /* the '\n' */
            int64_t v = f->num_neg ? -f->num : f->num;
            f->state = F_TYPE;
            switch (f->type) {
            case '$': case '=': case '!':
                if (v < 0) {
                    value_done(f, 0); /* null bulk */
                } else {
                    f->skip = v + 2;
                    f->state = F_SKIP;
                }
                break;
            case '%':
                open_aggregate(f, v < 0 ? v : 2 * v, 0);
                break;
            case '|':
                open_aggregate(f, v < 0 ? v : 2 * v, 1);
                break;
            default:
                open_aggregate(f, v, 0);
            }
            if (f->state == F_ERROR)
                return -1;
            break;
        }
        case F_LINE: {
            const char *nl = memchr(b + i, '\n', n - i);
            if (!nl) {
                i = n;
                break;
            }
            i = (size_t)(nl - b) + 1;
            f->state = F_TYPE;
            value_done(f, 0);
            break;
        }
        case F_SKIP: {
            size_t k = (size_t)f->skip < n - i ? (size_t)f->skip : n - i;
            f->skip -= (int64_t)k;
            i += k;
            if (!f->skip) {
                f->state = F_TYPE;
                value_done(f, 0);
            }
            break;
        }
        default:
            return -1;
        }
    }
    return f->error ? -1 : 0;
}
