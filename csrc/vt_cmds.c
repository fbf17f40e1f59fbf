/*
 * vt_cmds.c: the command table's index, the uncommitted-key table and the witness's table
 * (vt_cmds.h). Every shared word is accessed atomically.
 */
#include "vt_cmds.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#define INDEX_SIZE 8192 /* > 2 x VT_CMD_MAX: open addressing stays short */
#define KEY_BITS 16
#define KEY_SLOTS (1u << KEY_BITS)
#define WIT_BITS 13
#define WIT_WAYS 4
#define POS_BITS 40
#define POS_MASK ((1ull << POS_BITS) - 1)

static struct vt_offload_control *control;
static struct vt_offload_stats *stats;
static uint16_t index_[INDEX_SIZE]; /* entry number + 1; 0 = empty */
static int index_state;             /* 0 not built, 1 building, 2 built */

static uint32_t key_pending[KEY_SLOTS];
static uint64_t key_seq[KEY_SLOTS];
static uint64_t total_pending, wide_pending_n, wide_seq, max_write_seq;
static uint64_t wit[(1u << WIT_BITS) * WIT_WAYS];
static uint64_t flushes, deferred[8];
/* the dirty keys (slots committed past what is durable), in commit order: a slot is in the ring once */
static struct { uint32_t slot; uint64_t seq; } dirty[KEY_SLOTS];
static uint8_t dirty_in[KEY_SLOTS];
static uint32_t dirty_h, dirty_n;
static pthread_mutex_t dirty_mu = PTHREAD_MUTEX_INITIALIZER;

void vt_cmds_attach(struct vt_offload_control *ctl, struct vt_offload_stats *st)
{
    control = ctl;
    stats = st;
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        h ^= (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
        h *= 0x100000001b3ull;
    }
    return h;
}

static void build_index(void)
{
    uint32_t n = __atomic_load_n(&control->nentries, __ATOMIC_ACQUIRE);
    if (n > VT_CMD_MAX)
        n = VT_CMD_MAX;
    memset(index_, 0, sizeof(index_));
    for (uint32_t e = 0; e < n; e++) {
        const char *name = control->entries[e].name;
        size_t len = strnlen(name, VT_CMD_NAME);
        if (!len || len == VT_CMD_NAME)
            continue;
        for (uint64_t i = name_hash(name, len);; i++) {
            if (!index_[i % INDEX_SIZE]) {
                index_[i % INDEX_SIZE] = (uint16_t)(e + 1);
                break;
            }
        }
    }
    if (stats)
        __atomic_store_n(&stats->table_entries, n, __ATOMIC_RELAXED);
}

int vt_cmds_ready(void)
{
    int s = __atomic_load_n(&index_state, __ATOMIC_ACQUIRE);
    if (s == 2)
        return 1;
    if (s != 0 || !control || !__atomic_load_n(&control->table_ready, __ATOMIC_ACQUIRE))
        return 0;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&index_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return 0; /* another thread is building it: unknown until it is done */
    build_index();
    __atomic_store_n(&index_state, 2, __ATOMIC_RELEASE);
    return 1;
}

int vt_cmds_lookup(const char *name, size_t len, struct vt_cmdinfo *out)
{
    if (!len || len >= VT_CMD_NAME || !vt_cmds_ready())
        return 0;
    for (uint64_t i = name_hash(name, len);; i++) {
        uint16_t e = index_[i % INDEX_SIZE];
        if (!e)
            return 0;
        const struct vt_cmd_entry *c = &control->entries[e - 1];
        if (strncasecmp(c->name, name, len) == 0 && c->name[len] == '\0') {
            out->flags = c->flags;
            out->first = c->first;
            out->last = (int)c->last_plus - 0x8000;
            out->step = c->step ? c->step : 1;
            return 1;
        }
    }
}

static void atomic_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
}

/* the low 4 bits of a hash carry the caller's flags (offload_conn_int.h): never part of the slot */
static inline uint32_t key_slot(uint64_t h) { return (uint32_t)(h >> 4) & (KEY_SLOTS - 1); }

void vt_keys_pending(uint64_t h, int delta)
{
    __atomic_fetch_add(&key_pending[key_slot(h)], (uint32_t)delta, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&total_pending, (uint64_t)(int64_t)delta, __ATOMIC_ACQ_REL);
}

void vt_keys_commit(uint64_t h, uint64_t seq, int was_pending, uint64_t durable)
{
    uint32_t i = key_slot(h);
    atomic_max(&key_seq[i], seq);
    atomic_max(&max_write_seq, seq);
    if (was_pending)
        vt_keys_pending(h, -1); /* after seq: a reader never sees neither */
    if (seq <= durable || __atomic_load_n(&dirty_in[i], __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&dirty_mu);
    if (!dirty_in[i] && dirty_n < KEY_SLOTS) {
        dirty_in[i] = 1;
        dirty[(dirty_h + dirty_n++) % KEY_SLOTS].slot = i;
        dirty[(dirty_h + dirty_n - 1) % KEY_SLOTS].seq = seq;
        if (stats)
            __atomic_store_n(&stats->dirty_keys_now, dirty_n, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&dirty_mu);
}

void vt_keys_settle(uint64_t durable)
{
    pthread_mutex_lock(&dirty_mu);
    for (uint32_t turns = dirty_n; dirty_n && turns; turns--) {
        uint32_t i = dirty[dirty_h].slot;
        uint64_t now = __atomic_load_n(&key_seq[i], __ATOMIC_ACQUIRE);
        if (dirty[dirty_h].seq > durable)
            break; /* the oldest is not durable yet: nothing after it is */
        dirty_h = (dirty_h + 1) % KEY_SLOTS;
        dirty_n--;
        if (now > durable) { /* written again since: it stays dirty, at the back */
            dirty[(dirty_h + dirty_n++) % KEY_SLOTS].slot = i;
            dirty[(dirty_h + dirty_n - 1) % KEY_SLOTS].seq = now;
        } else {
            dirty_in[i] = 0;
        }
    }
    if (stats)
        __atomic_store_n(&stats->dirty_keys_now, dirty_n, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&dirty_mu);
}

uint64_t vt_keys_need(uint64_t h, uint64_t queued)
{
    uint32_t i = key_slot(h);
    if (__atomic_load_n(&key_pending[i], __ATOMIC_ACQUIRE))
        return queued;
    return __atomic_load_n(&key_seq[i], __ATOMIC_ACQUIRE);
}

void vt_wide_pending(int delta)
{
    __atomic_fetch_add(&wide_pending_n, (uint64_t)(int64_t)delta, __ATOMIC_ACQ_REL);
    __atomic_fetch_add(&total_pending, (uint64_t)(int64_t)delta, __ATOMIC_ACQ_REL);
}

void vt_wide_commit(uint64_t seq, int was_pending)
{
    atomic_max(&wide_seq, seq);
    atomic_max(&max_write_seq, seq);
    if (was_pending)
        vt_wide_pending(-1);
}

uint64_t vt_wide_need(uint64_t queued)
{
    if (__atomic_load_n(&wide_pending_n, __ATOMIC_ACQUIRE))
        return queued;
    return __atomic_load_n(&wide_seq, __ATOMIC_ACQUIRE);
}

uint64_t vt_wide_read_need(uint64_t queued)
{
    if (__atomic_load_n(&total_pending, __ATOMIC_ACQUIRE))
        return queued;
    return __atomic_load_n(&max_write_seq, __ATOMIC_ACQUIRE);
}

void vt_defer_wide(void)
{
    vt_wide_pending(1);
    uint64_t f = __atomic_load_n(&flushes, __ATOMIC_ACQUIRE);
    __atomic_fetch_add(&deferred[(f + 3) & 7], 1, __ATOMIC_ACQ_REL);
}

void vt_flush_tick(uint64_t queued)
{
    uint64_t f = __atomic_add_fetch(&flushes, 1, __ATOMIC_ACQ_REL);
    uint64_t n = __atomic_exchange_n(&deferred[f & 7], 0, __ATOMIC_ACQ_REL);
    if (n) {
        vt_wide_commit(queued, 0);
        vt_wide_pending(-(int)n);
    }
}

/* -- the witness ---------------------------------------------------------------------------- */

static inline uint64_t wit_bucket(uint64_t h) { return ((h >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - WIT_BITS); }
static inline uint64_t wit_tag(uint64_t h)
{
    uint64_t t = (h >> 40) & 0xFFFFFF;
    return t ? t : 1;
}

void vt_wit_put(uint64_t h, uint64_t pos, uint64_t durable)
{
    uint64_t *b = &wit[wit_bucket(h) * WIT_WAYS], tag = wit_tag(h), *free_way = NULL;
    if (pos > POS_MASK)
        pos = POS_MASK;
    for (int w = 0; w < WIT_WAYS; w++) {
        uint64_t e = __atomic_load_n(&b[w], __ATOMIC_RELAXED);
        if (e && (e >> POS_BITS) == tag) {
            if ((e & POS_MASK) < pos)
                __atomic_store_n(&b[w], (tag << POS_BITS) | pos, __ATOMIC_RELEASE);
            return;
        }
        if (!free_way && (!e || (e & POS_MASK) <= durable))
            free_way = &b[w]; /* empty, or its AOF bytes are durable: nothing to witness */
    }
    if (free_way)
        __atomic_store_n(free_way, (tag << POS_BITS) | pos, __ATOMIC_RELEASE);
    else if (stats)
        __atomic_fetch_add(&stats->witness_overflow, 1, __ATOMIC_RELAXED);
}

uint64_t vt_wit_get(uint64_t h)
{
    uint64_t *b = &wit[wit_bucket(h) * WIT_WAYS], tag = wit_tag(h);
    for (int w = 0; w < WIT_WAYS; w++) {
        uint64_t e = __atomic_load_n(&b[w], __ATOMIC_ACQUIRE);
        if (e && (e >> POS_BITS) == tag)
            return e & POS_MASK;
    }
    return 0;
}
