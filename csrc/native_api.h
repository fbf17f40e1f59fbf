/* The surface of valkeytrace._native, read by csrc/build_ffi.py into ffi.cdef().
 * Plain declarations only (cffi parses this, not a C compiler); the definitions live in
 * valkeytrace.h, hist.c, shim_region.c and events.c. `...` lets the compiler fill in the real values. */

#define VT_HIST_BUCKETS ...
#define VT_HIST_SUB_COUNT ...
#define VT_HIST_MAX_BITS ...
#define VT_CALL_KINDS ...
#define VT_STATE_KINDS ...
#define VT_SHIM_MAGIC ...
#define VT_SHIM_VERSION ...
#define VT_SHIM_MAX_THREADS ...

struct vt_hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t min_ns;
    uint64_t max_ns;
    uint64_t buckets[...];
};

struct vt_block_event {
    uint64_t start_ns;
    uint64_t duration_ns;
    uint32_t tid;
    uint16_t cause;
    uint16_t state;
    uint32_t bytes;
    uint32_t pad;
};

struct vt_shim_thread {
    uint32_t tid;
    uint32_t claimed;
    char name[16];
    uint64_t bytes[...];
    uint64_t injected_ns;
    struct vt_hist hist[...];
};

struct vt_shim_header {
    uint32_t magic;
    uint32_t version;
    uint32_t max_threads;
    uint32_t nthreads;
    uint32_t pid;
    uint32_t hist_buckets;
    uint32_t paused;
    uint32_t untimed;
    uint64_t thread_size;
    uint64_t dropped_calls;
    uint64_t inject_delay_ns;
    uint64_t extra_delay_ns;
};

/* the virtual offload's shared file (csrc/offload_layout.h): mirrored by tracers/offload.py, checked by a test */
#define VT_OFFLOAD_MAGIC ...
#define VT_OFFLOAD_VERSION ...
#define VT_OFFLOAD_WAITED_MAX ...
#define VT_CMD_MAX ...
#define VT_CMD_NAME ...

struct vt_offload_stats {
    uint32_t magic;
    uint32_t version;
    uint32_t mode;
    uint32_t hist_buckets;
    uint32_t state;
    uint32_t fail_kind;
    uint32_t fail_errno;
    uint32_t table_entries;
    uint64_t jobs;
    uint64_t job_bytes;
    uint64_t offloaded_writes;
    uint64_t offloaded_syncs;
    uint64_t queued_bytes;
    uint64_t durable_bytes;
    uint64_t commands;
    uint64_t write_commands;
    uint64_t unknown_commands;
    uint64_t replies;
    uint64_t held_replies;
    uint64_t held_write_replies;
    uint64_t held_read_replies;
    uint64_t held_bytes;
    uint64_t released_replies;
    uint64_t dropped_replies;
    uint64_t early_replies;
    uint64_t witness_checked;
    uint64_t witness_overflow;
    uint64_t unsynced_conns;
    uint64_t blocked_deliveries;
    uint64_t jobs_waited_sum;
    uint64_t replica_links;
    uint64_t stream_bytes;
    uint64_t stream_held_bytes;
    uint64_t obuf_closed;
    uint64_t exit_held_replies;
    uint64_t shutdown_drains;
    uint64_t signals;
    uint64_t stream_dirty_bytes;
    uint64_t rejected_writes;
    uint64_t paused_reads;
    uint64_t paused_ns;
    uint64_t handoff_waits;
    uint64_t handoff_wait_ns;
    uint64_t postponed_writes;
    uint64_t forced_writes;
    uint64_t held_now;
    uint64_t behind_now;
    uint64_t held_bytes_now;
    uint64_t dirty_keys_now;
    uint64_t pending_now;
    uint32_t last_signal;
    uint32_t design;
    uint64_t jobs_waited[...];
    struct vt_hist job_ns;
    struct vt_hist hold_ns;
    struct vt_hist hold_read_ns;
    struct vt_hist postpone_ns;
    struct vt_hist main_write_ns;
};

struct vt_cmd_entry {
    char name[...];
    uint32_t flags;
    uint16_t first;
    uint16_t step;
    uint32_t last_plus;
    uint32_t pad;
};

struct vt_obuf_limit {
    uint64_t hard_bytes;
    uint64_t soft_bytes;
    uint64_t soft_seconds;
};

struct vt_offload_control {
    uint32_t table_ready;
    uint32_t nentries;
    uint64_t gather_ns;
    uint64_t max_pending;
    uint32_t overflow;
    uint32_t replicas;
    char logfile[...];
    struct vt_obuf_limit obuf_normal;
    struct vt_obuf_limit obuf_replica;
    struct vt_cmd_entry entries[...];
};

struct vt_replica_link {
    uint32_t port;
    uint32_t wake;
    uint64_t sent;
    uint64_t committed;
};

struct vt_offload_shared {
    struct vt_offload_stats stats;
    struct vt_offload_control control;
    struct vt_replica_link links[...];
};

struct vt_event_sink {
    uint8_t *buf;
    size_t len;
    size_t cap;
    size_t record_size;
    size_t max_bytes;
    uint64_t records;
    uint64_t dropped;
};

int vt_event_sink_collect(void *ctx, void *data, size_t size);
void vt_event_sink_free(struct vt_event_sink *sink);
uint64_t vt_call_logs_take(struct vt_event_sink *sink, uint8_t *base, size_t stride, unsigned ncpu, uint64_t size,
                           int keep);

size_t vt_shim_region_size(void);
int vt_shim_region_init(void *base, size_t len, uint64_t inject_delay_ns);
int vt_shim_readable_slots(const void *base, size_t len);
int vt_shim_copy_slot(const void *base, size_t len, int i, struct vt_shim_thread *out);

uint32_t vt_hist_bucket_index(uint64_t value_ns);
uint64_t vt_hist_bucket_lower(uint32_t index);
uint64_t vt_hist_bucket_upper(uint32_t index);

void vt_hist_reset(struct vt_hist *h);
void vt_hist_record(struct vt_hist *h, uint64_t value_ns);
void vt_hist_record_array(struct vt_hist *h, const uint64_t *values_ns, size_t n);
void vt_hist_merge(struct vt_hist *dst, const struct vt_hist *src);
int vt_hist_set_buckets(struct vt_hist *h, const uint64_t *counts, size_t n_buckets);
int vt_hist_percentiles(const struct vt_hist *h, const double *pcts, size_t n, uint64_t *out_ns);

int vt_sched_set_slice(int tid, int nice, uint64_t slice_ns);
int64_t vt_sched_get_slice(int tid);
int vt_bpf_enable_stats(void);

/* the open-loop client (csrc/vt_load.h) */
#define VT_LOAD_GET ...
#define VT_LOAD_SET ...
#define VT_LOAD_POISSON ...
#define VT_LOAD_UNIFORM ...

struct vt_load_config {
    const char *host;
    int port;
    int op;
    uint32_t keyspace;
    uint32_t value_size;
    double rate;
    int arrival;
    int conns;
    int max_conns;
    int hold;
    uint64_t warmup_ns;
    uint64_t duration_ns;
    uint64_t grace_ns;
    uint64_t drain_ns;
    uint64_t late_ns;
    uint64_t seed;
    int marker_fd;
    uint64_t *acked;
    uint64_t cut_after_ns;
    const void *stalls;
    const char *replica_host;
    int replica_port;
    int readers;
    uint64_t *seen;
    uint64_t *reads;
    uint64_t reads_cap;
    uint64_t seq_epoch;
    const uint32_t *keys;
    uint32_t nkeys;
    int survive;
};

struct vt_reader_stats {
    uint64_t reads, misses, logged;
    uint64_t log_stride;
    uint64_t with_seq;
    struct vt_hist latency;
};

struct vt_load_result {
    uint64_t window_start_ns, window_end_ns;
    uint64_t due, sent, answered, late, errors, unanswered;
    uint64_t answered_in_window;
    uint64_t answered_drained;
    uint64_t first_answer_ns, last_answer_ns;
    uint64_t conns, pipelined;
    uint64_t held, held_max;
    uint64_t rejected;
    uint64_t acked;
    struct vt_hist corrected;
    struct vt_hist service;
    struct vt_hist in_stall;
    struct vt_hist outside;
    struct vt_reader_stats replica;
    int error;
    char message[160];
};

int vt_load_run(const struct vt_load_config *cfg, struct vt_load_result *res);
