/*
 * ctfcols: decode CTF traces into the columns of rpcscope.analysis.traceread.
 *
 *   ctfcols OUT_DIR TRACE_DIR...
 *
 * Reads every TRACE_DIR (a directory holding a CTF `metadata` file) with
 * libbabeltrace2's source.ctf.fs and utils.muxer, and writes OUT_DIR/<column>.bin
 * (raw little-endian arrays, one per column, same order and types as
 * traceread.COLUMNS) and OUT_DIR/meta.json (names, threads, problems, clock).
 * Memory stays flat: rows go straight to buffered column files.
 *
 * The normalisation of event names and fields mirrors traceread.py's Python
 * decoder exactly; tests compare the two backends column by column.
 * Exit status: 0 success, 1 a decoding error (meta.json has "error"; the columns
 * hold what was decoded before it), 2 bad usage or output error.
 */
#include "ctfread.h"

#include <babeltrace2/babeltrace.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The kinds of events and every spelling of each, from the step catalog (tracepoints/steps.toml
 * [kernel_events], [kernel_syscalls]): the same numbering as rpcscope.analysis.traceread.KIND. */
#include "rpcscope_kernel.h"

/* ---------------------------------------------------------------- columns */

enum {
    C_TS,
    C_CPU,
    C_TID,
    C_PID,
    C_KIND,
    C_NAME,
    C_CALL_ID,
    C_FRAG,
    C_NBYTES,
    C_SKB,
    C_DEV,
    C_TID2,
    C_STATE,
    C_VEC,
    C_SRC,
    NCOL
};
static const char *col_name[NCOL] = { "ts",     "cpu", "tid", "pid",  "kind",  "name", "call_id", "frag",
                                      "nbytes", "skb", "dev", "tid2", "state", "vec",  "src" };
static FILE *col_file[NCOL];

struct row {
    int64_t ts;
    int16_t cpu;
    int32_t tid, pid;
    uint8_t kind;
    int32_t name;
    uint64_t call_id;
    int32_t frag;
    int64_t nbytes;
    uint64_t skb;
    int32_t dev, tid2;
    int64_t state;
    int32_t vec;
    uint8_t src;
};

/* Rows gather CHUNK at a time and leave column by column: one fwrite per column per chunk
 * rather than fifteen (locked) stdio calls per event, a tenth of the extractor's time. */
#define CHUNK 16384
static struct row chunk[CHUNK];
static size_t chunk_len;
static unsigned char colbuf[CHUNK * 8];
static int write_failed;

#define FLUSH_COLUMN(c, field)                                        \
    do {                                                              \
        const size_t sz_ = sizeof chunk[0].field;                     \
        for (size_t i_ = 0; i_ < chunk_len; i_++)                     \
            memcpy(colbuf + i_ * sz_, &chunk[i_].field, sz_);         \
        if (fwrite(colbuf, sz_, chunk_len, col_file[c]) != chunk_len) \
            write_failed = 1;                                         \
    } while (0)

static void flush_rows(void)
{
    FLUSH_COLUMN(C_TS, ts);
    FLUSH_COLUMN(C_CPU, cpu);
    FLUSH_COLUMN(C_TID, tid);
    FLUSH_COLUMN(C_PID, pid);
    FLUSH_COLUMN(C_KIND, kind);
    FLUSH_COLUMN(C_NAME, name);
    FLUSH_COLUMN(C_CALL_ID, call_id);
    FLUSH_COLUMN(C_FRAG, frag);
    FLUSH_COLUMN(C_NBYTES, nbytes);
    FLUSH_COLUMN(C_SKB, skb);
    FLUSH_COLUMN(C_DEV, dev);
    FLUSH_COLUMN(C_TID2, tid2);
    FLUSH_COLUMN(C_STATE, state);
    FLUSH_COLUMN(C_VEC, vec);
    FLUSH_COLUMN(C_SRC, src);
    chunk_len = 0;
}

static void put_row(const struct row *r)
{
    chunk[chunk_len++] = *r;
    if (chunk_len == CHUNK)
        flush_rows();
}

/* ---------------------------------------------------------------- interned names */

static char **names;
static size_t n_names, cap_names;
#define HBITS 16
static int32_t htab[1 << HBITS];

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int32_t intern(const char *s)
{
    uint32_t h = hash(s) & ((1 << HBITS) - 1);
    while (htab[h]) {
        if (!strcmp(names[htab[h] - 1], s))
            return htab[h] - 1;
        h = (h + 1) & ((1 << HBITS) - 1);
    }
    if (n_names + 1 >= (1 << HBITS) / 2) {
        fprintf(stderr, "ctfcols: too many distinct names\n");
        exit(2);
    }
    if (n_names == cap_names) {
        cap_names = cap_names ? cap_names * 2 : 256;
        names = realloc(names, cap_names * sizeof *names);
    }
    names[n_names] = strdup(s);
    htab[h] = (int32_t)++n_names;
    return (int32_t)(n_names - 1);
}

/* ---------------------------------------------------------------- threads and problems (JSON text) */

struct thread {
    int32_t tid, pid;
    int32_t procname;
};
static struct thread *threads;
static size_t n_threads, cap_threads;
#define TBITS 16
static int32_t ttab[1 << TBITS]; /* tid -> index + 1, open addressing */

static void add_thread(int32_t tid, int32_t pid, const char *procname)
{
    uint32_t h = ((uint32_t)tid * 2654435761u) >> (32 - TBITS);
    while (ttab[h]) {
        if (threads[ttab[h] - 1].tid == tid)
            return;
        h = (h + 1) & ((1 << TBITS) - 1);
    }
    if (n_threads + 1 >= (1 << TBITS) / 2)
        return;
    if (n_threads == cap_threads) {
        cap_threads = cap_threads ? cap_threads * 2 : 256;
        threads = realloc(threads, cap_threads * sizeof *threads);
    }
    threads[n_threads] = (struct thread){ tid, pid, intern(procname) };
    ttab[h] = (int32_t)++n_threads;
}

static char *problems;
static size_t problems_len;

/* Length of the well-formed UTF-8 sequence at s (1 to 4), 0 if there is none: names and messages
 * come from the trace, which damage can fill with any bytes, and meta.json must stay valid JSON. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80                    ? 1
            : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
            : s[0] >= 0xe0 && s[0] <= 0xef ? 3
            : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                           : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
        return 0; /* overlong, a surrogate, beyond U+10FFFF */
    return n;
}

static void json_str(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else if (n)
            fwrite(p, 1, (size_t)n, f);
        else
            fputs("\\ufffd", f); /* a byte that is not UTF-8: the replacement character */
        p += n ? n : 1;
    }
    fputc('"', f);
}

static void json_str_or_null(FILE *f, const char *s)
{
    if (s)
        json_str(f, s);
    else
        fputs("null", f);
}

static void add_problem(const char *what, int64_t count, int have_range, uint64_t b, uint64_t e)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s{\"what\": \"%s\", \"count\": %s", problems_len ? ", " : "", what,
                     count < 0 ? "null" : "");
    if (count >= 0)
        n += snprintf(buf + n, sizeof buf - n, "%" PRId64, count);
    if (have_range)
        n += snprintf(buf + n, sizeof buf - n, ", \"begin_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64, b, e);
    n += snprintf(buf + n, sizeof buf - n, "}");
    problems = realloc(problems, problems_len + n + 1);
    memcpy(problems + problems_len, buf, n + 1);
    problems_len += n;
}

/* ---------------------------------------------------------------- per event class decoders */

enum { F_NONE = -1 };
struct decoder {
    const void *cls;
    uint8_t kind;
    int32_t name;
    int perf;                       /* perf_tid / perf_pid in the payload */
    int ctx_tid, ctx_pid, ctx_proc; /* common context member indexes */
    int f_call_id, f_frag, f_nbytes, f_skb, f_dev, f_tid2, f_state, f_vec, f_comm, f_prev;
    int f_perf_tid, f_perf_pid;
    struct decoder *next;
};
#define DBITS 12
static struct decoder *dtab[1 << DBITS];

/* How a decoder finds an event class's members: through libbabeltrace2's field classes or ctfread's
 * types. member(type, name, want) is the index of the member of that name when it holds what is
 * wanted ('i' an integer or enumeration, 's' a string), else F_NONE. */
struct lookup {
    int (*member)(const void *type, const char *name, char want);
    const void *payload, *common;
};

static int bt_member(const void *type, const char *name, char want)
{
    const bt_field_class *sc = type;
    if (!sc)
        return F_NONE;
    uint64_t n = bt_field_class_structure_get_member_count(sc);
    for (uint64_t i = 0; i < n; i++) {
        const bt_field_class_structure_member *m = bt_field_class_structure_borrow_member_by_index_const(sc, i);
        if (strcmp(bt_field_class_structure_member_get_name(m), name))
            continue;
        bt_field_class_type t = bt_field_class_get_type(bt_field_class_structure_member_borrow_field_class_const(m));
        int is_int = bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_INTEGER);
        return (want == 'i' && is_int) || (want == 's' && t == BT_FIELD_CLASS_TYPE_STRING) ? (int)i : F_NONE;
    }
    return F_NONE;
}

static int ctf_member(const void *type, const char *name, char want)
{
    int i = ctfread_member(type, name);
    return i >= 0 && ctfread_member_kind(type, i) == want ? i : F_NONE;
}

static int member(const struct lookup *l, const void *sc, const char *name, char want)
{
    return l->member(sc, name, want);
}

static int first_member(const struct lookup *l, const void *sc, const char *a, const char *b, char want)
{
    int i = member(l, sc, a, want);
    return i != F_NONE || !b ? i : member(l, sc, b, want);
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static void normalise(const char *raw, uint8_t *kind, int32_t *name)
{
    if (starts(raw, "rpcscope:")) {
        *kind = K_USER;
        *name = intern(raw + strlen("rpcscope:"));
        return;
    }
    for (size_t i = 0; i < sizeof rpcscope_syscall_prefixes / sizeof rpcscope_syscall_prefixes[0]; i++)
        if (starts(raw, rpcscope_syscall_prefixes[i].prefix)) {
            *kind = rpcscope_syscall_prefixes[i].kind;
            *name = intern(raw + strlen(rpcscope_syscall_prefixes[i].prefix));
            return;
        }
    for (size_t i = 0; i < sizeof rpcscope_kernel_names / sizeof rpcscope_kernel_names[0]; i++)
        if (!strcmp(raw, rpcscope_kernel_names[i].raw)) {
            *kind = rpcscope_kernel_names[i].kind;
            *name = intern(rpcscope_kernel_names[i].name);
            return;
        }
    *kind = K_OTHER;
    *name = intern(raw);
}

/* The decoder of an event class (key: its libbabeltrace2 or ctfread class), made on first sight. */
static struct decoder *decoder_of(const void *cls, const char *raw, const struct lookup *l)
{
    uint32_t h = (uint32_t)(((uintptr_t)cls >> 4) * 2654435761u) >> (32 - DBITS);
    for (struct decoder *d = dtab[h]; d; d = d->next)
        if (d->cls == cls)
            return d;
    struct decoder *d = calloc(1, sizeof *d);
    if (!d) {
        fprintf(stderr, "ctfcols: out of memory\n");
        exit(2);
    }
    d->cls = cls;
    normalise(raw ? raw : "", &d->kind, &d->name);
    const void *p = l->payload, *cc = l->common;
    d->f_perf_tid = member(l, p, "perf_tid", 'i');
    d->f_perf_pid = member(l, p, "perf_pid", 'i');
    d->perf = d->f_perf_tid != F_NONE && d->f_perf_pid != F_NONE;
    d->ctx_tid = first_member(l, cc, "vtid", "tid", 'i');
    d->ctx_pid = first_member(l, cc, "vpid", "pid", 'i');
    d->ctx_proc = member(l, cc, "procname", 's');
    d->f_call_id = d->f_frag = d->f_nbytes = d->f_skb = d->f_dev = d->f_tid2 = d->f_state = d->f_vec = F_NONE;
    d->f_comm = d->f_prev = F_NONE;
    switch (d->kind) {
    case K_USER:
        d->f_call_id = member(l, p, "call_id", 'i');
        d->f_frag = first_member(l, p, "frag", "window", 'i');
        d->f_nbytes = first_member(l, p, "bytes", "frags", 'i');
        break;
    case K_SYS_EXIT: d->f_nbytes = member(l, p, "ret", 'i'); break;
    case K_NET_QUEUE:
    case K_NET_START_XMIT:
    case K_NET_XMIT:
    case K_NET_RECEIVE:
    case K_NET_RX:
    case K_COPY_TO_USER:
        d->f_skb = member(l, p, "skbaddr", 'i');
        d->f_nbytes = member(l, p, "len", 'i');
        d->f_dev = member(l, p, "name", 's');
        break;
    case K_SOFTIRQ_ENTRY:
    case K_SOFTIRQ_EXIT:
    case K_SOFTIRQ_RAISE: d->f_vec = member(l, p, "vec", 'i'); break;
    case K_IRQ_ENTRY:
    case K_IRQ_EXIT: d->f_vec = member(l, p, "irq", 'i'); break;
    case K_SCHED_WAKING:
    case K_SCHED_WAKEUP:
        d->f_tid2 = member(l, p, d->perf && member(l, p, "pid", 'i') != F_NONE ? "pid" : "tid", 'i');
        d->f_vec = member(l, p, "target_cpu", 'i');
        d->f_comm = member(l, p, "comm", 's');
        break;
    case K_SCHED_SWITCH:
        d->f_tid2 = first_member(l, p, "next_pid", "next_tid", 'i');
        d->f_prev = first_member(l, p, "prev_pid", "prev_tid", 'i');
        d->f_state = member(l, p, "prev_state", 'i');
        d->f_comm = member(l, p, "next_comm", 's');
        break;
    }
    d->next = dtab[h];
    dtab[h] = d;
    return d;
}

/* An event's values, read through libbabeltrace2's fields or from ctfread's decoded scopes. */
struct values {
    int64_t (*ival)(const void *scope, int idx, int64_t dflt);
    const char *(*sval)(const void *scope, int idx);
    const void *payload, *common;
};

static int64_t bt_ival(const void *scope, int idx, int64_t dflt)
{
    const bt_field *s = scope;
    if (idx == F_NONE || !s)
        return dflt;
    const bt_field *f = bt_field_structure_borrow_member_field_by_index_const(s, (uint64_t)idx);
    bt_field_class_type t = bt_field_get_class_type(f);
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_UNSIGNED_INTEGER))
        return (int64_t)bt_field_integer_unsigned_get_value(f);
    if (bt_field_class_type_is(t, BT_FIELD_CLASS_TYPE_SIGNED_INTEGER))
        return bt_field_integer_signed_get_value(f);
    return dflt;
}

static const char *bt_sval(const void *scope, int idx)
{
    const bt_field *s = scope;
    if (idx == F_NONE || !s)
        return NULL;
    const bt_field *f = bt_field_structure_borrow_member_field_by_index_const(s, (uint64_t)idx);
    return bt_field_get_class_type(f) == BT_FIELD_CLASS_TYPE_STRING ? bt_field_string_get_value(f) : NULL;
}

static int64_t ctf_ival(const void *scope, int idx, int64_t dflt)
{
    const struct ctfread_scope *s = scope;
    return idx == F_NONE || !s->type ? dflt : s->ival[idx];
}

static const char *ctf_sval(const void *scope, int idx)
{
    const struct ctfread_scope *s = scope;
    return idx == F_NONE || !s->type ? NULL : s->sval[idx];
}

/* ---------------------------------------------------------------- the sink */

struct state {
    uint8_t src;
    uint64_t events;
    const bt_packet *last_packet;
    int16_t last_cpu;
    const bt_clock_class *clock;           /* libbabeltrace2's pass: the first event's clock */
    const struct ctfread_clock *own_clock; /* ctfread's pass: the same */
    uint64_t freq;
    struct ctfread_clock clock_copy; /* either, kept past the pass (the graph owns bt's) */
    char clock_name[256];
    int have_clock;
};

/* Keep the first event's clock (libbabeltrace2's clock class or ctfread's) for meta.json. */
static void keep_clock(struct state *st, const struct ctfread_clock *c)
{
    st->clock_copy = *c;
    if (c->name) {
        snprintf(st->clock_name, sizeof st->clock_name, "%s", c->name);
        st->clock_copy.name = st->clock_name;
    }
    st->freq = c->freq;
    st->have_clock = 1;
}

static int16_t cpu_of(const bt_event *ev)
{
    const bt_packet *pkt = bt_event_borrow_packet_const(ev);
    if (!pkt)
        return -1;
    const bt_field *ctx = bt_packet_borrow_context_field_const(pkt);
    if (!ctx)
        return -1;
    const bt_field *f = bt_field_structure_borrow_member_field_by_name_const(ctx, "cpu_id");
    if (!f)
        return -1;
    return (int16_t)bt_field_integer_unsigned_get_value(f);
}

/* One row from an event's decoder, raw timestamp, CPU and values. */
static void put_event(struct state *st, const struct decoder *d, uint64_t v, int16_t cpu, const struct values *vals)
{
    struct row r = { 0 };
    const void *p = vals->payload, *cc = vals->common;
    r.ts = (int64_t)(st->freq == 1000000000ull ? v : (uint64_t)((unsigned __int128)v * 1000000000u / st->freq));
    r.cpu = cpu;
    if (d->perf) {
        r.tid = (int32_t)vals->ival(p, d->f_perf_tid, -1);
        r.pid = (int32_t)vals->ival(p, d->f_perf_pid, -1);
    } else {
        r.tid = (int32_t)vals->ival(cc, d->ctx_tid, -1);
        r.pid = (int32_t)vals->ival(cc, d->ctx_pid, -1);
        if (d->ctx_proc != F_NONE && r.tid >= 0) {
            const char *pn = vals->sval(cc, d->ctx_proc);
            if (pn)
                add_thread(r.tid, r.pid, pn);
        }
    }
    r.kind = d->kind;
    r.name = d->name;
    r.call_id = (uint64_t)vals->ival(p, d->f_call_id, 0);
    r.frag = (int32_t)vals->ival(p, d->f_frag, -1);
    r.nbytes = vals->ival(p, d->f_nbytes, -1);
    r.skb = (uint64_t)vals->ival(p, d->f_skb, 0);
    const char *dev = vals->sval(p, d->f_dev);
    r.dev = dev ? intern(dev) : -1;
    r.tid2 = (int32_t)vals->ival(p, d->f_tid2, -1);
    r.state = vals->ival(p, d->f_state, -1);
    r.vec = (int32_t)vals->ival(p, d->f_vec, -1);
    r.src = st->src;
    if (d->kind == K_SCHED_SWITCH && !d->perf && d->ctx_tid == F_NONE)
        r.tid = (int32_t)vals->ival(p, d->f_prev, -1);
    if (d->f_comm != F_NONE && r.tid2 >= 0) {
        const char *comm = vals->sval(p, d->f_comm);
        if (comm)
            add_thread(r.tid2, -1, comm);
    }
    put_row(&r);
    st->events++;
}

static void on_event(struct state *st, const bt_message *msg)
{
    const bt_event *ev = bt_message_event_borrow_event_const(msg);
    const bt_event_class *cls = bt_event_borrow_class_const(ev);
    struct lookup l = { bt_member, bt_event_class_borrow_payload_field_class_const(cls),
                        bt_stream_class_borrow_event_common_context_field_class_const(
                            bt_event_class_borrow_stream_class_const(cls)) };
    struct decoder *d = decoder_of(cls, bt_event_class_get_name(cls), &l);
    const bt_clock_snapshot *cs = bt_message_event_borrow_default_clock_snapshot_const(msg);
    if (!st->clock) {
        st->clock = bt_clock_snapshot_borrow_clock_class_const(cs);
        struct ctfread_clock c = { .name = bt_clock_class_get_name(st->clock),
                                   .freq = bt_clock_class_get_frequency(st->clock),
                                   .origin_is_unix_epoch = bt_clock_class_origin_is_unix_epoch(st->clock) };
        bt_uuid u = bt_clock_class_get_uuid(st->clock);
        if (u) {
            c.have_uuid = 1;
            memcpy(c.uuid, u, 16);
        }
        bt_clock_class_get_offset(st->clock, &c.offset_s, &c.offset_cycles);
        keep_clock(st, &c);
    }
    const bt_packet *pkt = bt_event_borrow_packet_const(ev);
    if (pkt != st->last_packet) {
        st->last_packet = pkt;
        st->last_cpu = cpu_of(ev);
    }
    struct values vals = { bt_ival, bt_sval, bt_event_borrow_payload_field_const(ev),
                           bt_event_borrow_common_context_field_const(ev) };
    put_event(st, d, bt_clock_snapshot_get_value(cs), st->last_cpu, &vals);
}

static void on_discarded(const bt_message *msg, int events)
{
    uint64_t count = 0, b = 0, e = 0;
    int have_count, have_range;
    const bt_stream *stream;
    if (events) {
        have_count = bt_message_discarded_events_get_count(msg, &count) == BT_PROPERTY_AVAILABILITY_AVAILABLE;
        stream = bt_message_discarded_events_borrow_stream_const(msg);
        have_range =
            bt_stream_class_discarded_events_have_default_clock_snapshots(bt_stream_borrow_class_const(stream));
        if (have_range) {
            b = bt_clock_snapshot_get_value(
                bt_message_discarded_events_borrow_beginning_default_clock_snapshot_const(msg));
            e = bt_clock_snapshot_get_value(bt_message_discarded_events_borrow_end_default_clock_snapshot_const(msg));
        }
    } else {
        have_count = bt_message_discarded_packets_get_count(msg, &count) == BT_PROPERTY_AVAILABILITY_AVAILABLE;
        stream = bt_message_discarded_packets_borrow_stream_const(msg);
        have_range =
            bt_stream_class_discarded_packets_have_default_clock_snapshots(bt_stream_borrow_class_const(stream));
        if (have_range) {
            b = bt_clock_snapshot_get_value(
                bt_message_discarded_packets_borrow_beginning_default_clock_snapshot_const(msg));
            e = bt_clock_snapshot_get_value(bt_message_discarded_packets_borrow_end_default_clock_snapshot_const(msg));
        }
    }
    add_problem(events ? "discarded_events" : "discarded_packets", have_count ? (int64_t)count : -1, have_range, b, e);
}

static bt_graph_simple_sink_component_consume_func_status consume(bt_message_iterator *it, void *data)
{
    struct state *st = data;
    bt_message_array_const msgs;
    uint64_t n;
    switch (bt_message_iterator_next(it, &msgs, &n)) {
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_END: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_END;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_AGAIN: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_AGAIN;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_MEMORY_ERROR:
        return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_MEMORY_ERROR;
    case BT_MESSAGE_ITERATOR_NEXT_STATUS_OK: break;
    default: return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_ERROR;
    }
    for (uint64_t i = 0; i < n; i++) {
        switch (bt_message_get_type(msgs[i])) {
        case BT_MESSAGE_TYPE_EVENT: on_event(st, msgs[i]); break;
        case BT_MESSAGE_TYPE_DISCARDED_EVENTS: on_discarded(msgs[i], 1); break;
        case BT_MESSAGE_TYPE_DISCARDED_PACKETS: on_discarded(msgs[i], 0); break;
        default: break;
        }
        bt_message_put_ref(msgs[i]);
    }
    return BT_GRAPH_SIMPLE_SINK_COMPONENT_CONSUME_FUNC_STATUS_OK;
}

/* ---------------------------------------------------------------- ctfread's pass */

/* Decode with rpcscope's own reader: 0 when every event was read, else CTFREAD_UNSUPPORTED or
 * CTFREAD_FALLBACK with the reason in why (the caller then starts over with libbabeltrace2). */
static int read_own(char *const *dirs, int n, struct state *st, struct ctfread_reader **reader, char *why,
                    size_t why_size)
{
    const struct ctfread_event *ev = NULL;
    int rc = ctfread_open(dirs, n, reader, why, why_size);
    if (rc)
        return rc;
    while ((rc = ctfread_next(*reader, &ev, why, why_size)) == 1) {
        if (!st->own_clock && ctfread_event_clock(*reader)) {
            st->own_clock = ctfread_event_clock(*reader);
            keep_clock(st, st->own_clock);
        }
        struct lookup l = { ctf_member, ctfread_class_payload(ev->cls), ctfread_class_common(ev->cls) };
        struct decoder *d = decoder_of(ev->cls, ctfread_class_name(ev->cls), &l);
        struct values vals = { ctf_ival, ctf_sval, &ev->payload, &ev->common };
        put_event(st, d, ev->ts, (int16_t)ev->cpu, &vals);
    }
    if (rc < 0)
        return -rc;
    const struct ctfread_discarded *disc;
    size_t nd = ctfread_discarded(*reader, &disc);
    for (size_t i = 0; i < nd; i++)
        add_problem("discarded_events", (int64_t)disc[i].count, 1, disc[i].begin, disc[i].end);
    return 0;
}

/* Forget what a refused ctfread pass wrote: rows, names, threads, problems, decoders. */
static void start_over(struct state *st)
{
    chunk_len = 0;
    for (int c = 0; c < NCOL; c++)
        if (fflush(col_file[c]) || ftruncate(fileno(col_file[c]), 0) || fseek(col_file[c], 0, SEEK_SET))
            write_failed = 1;
    for (size_t i = 0; i < n_names; i++)
        free(names[i]);
    n_names = 0;
    memset(htab, 0, sizeof htab);
    n_threads = 0;
    memset(ttab, 0, sizeof ttab);
    free(problems);
    problems = NULL;
    problems_len = 0;
    for (size_t h = 0; h < sizeof dtab / sizeof dtab[0]; h++)
        while (dtab[h]) {
            struct decoder *d = dtab[h];
            dtab[h] = d->next;
            free(d);
        }
    st->events = 0;
    st->own_clock = NULL;
    st->have_clock = 0;
    st->freq = 1000000000ull;
}

static void json_clock(FILE *m, const char *name, const uint8_t *u, uint64_t freq, int origin_unix, int64_t off_s,
                       uint64_t off_c)
{
    fputs("{\"name\": ", m);
    json_str_or_null(m, name);
    if (u)
        fprintf(m, ", \"uuid\": \"%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    else
        fputs(", \"uuid\": null", m);
    fprintf(m, ", \"frequency\": %" PRIu64 ", \"origin_is_unix_epoch\": %s, \"offset_ns\": %" PRId64 "}", freq,
            origin_unix ? "true" : "false",
            (int64_t)(off_s * 1000000000LL + (int64_t)((unsigned __int128)off_c * 1000000000u / freq)));
}

/* The deepest causes of libbabeltrace2's current error, as one line. */
static void error_text(char *buf, size_t size)
{
    const bt_error *err = bt_current_thread_take_error();
    buf[0] = 0;
    if (!err) {
        snprintf(buf, size, "unknown babeltrace2 error");
        return;
    }
    size_t len = 0;
    uint64_t n = bt_error_get_cause_count(err);
    for (uint64_t i = 0, shown = 0; i < n && shown < 3; i++) {
        const char *m = bt_error_cause_get_message(bt_error_borrow_cause_by_index(err, i));
        if (!strncmp(m, "Component initialization method failed", 38))
            continue;
        len += snprintf(buf + len, len < size ? size - len : 0, "%s%s", shown ? "; " : "", m);
        shown++;
    }
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    bt_error_release(err);
}

/* ---------------------------------------------------------------- libbabeltrace2's pass */

/* Decode with source.ctf.fs and utils.muxer; err gets libbabeltrace2's error, if any. */
static void read_bt(char *const *dirs, int n, struct state *st, char *err, size_t err_size)
{
    const bt_plugin *ctf = NULL, *utils = NULL;
    bt_graph *g = bt_graph_create(0);
    bt_value *params = bt_value_map_create(), *inputs = bt_value_array_create();
    for (int i = 0; i < n; i++)
        bt_value_array_append_string_element(inputs, dirs[i]);
    bt_value_map_insert_entry(params, "inputs", inputs);
    const bt_component_source *src = NULL;
    const bt_component_filter *mux = NULL;
    const bt_component_sink *sink = NULL;
    if (bt_plugin_find("ctf", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &ctf) != BT_PLUGIN_FIND_STATUS_OK ||
        bt_plugin_find("utils", BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, BT_TRUE, &utils) != BT_PLUGIN_FIND_STATUS_OK) {
        snprintf(err, err_size, "babeltrace2's ctf or utils plugin is missing");
        goto out;
    }
    if (bt_graph_add_source_component(g, bt_plugin_borrow_source_component_class_by_name_const(ctf, "fs"), "src",
                                      params, BT_LOGGING_LEVEL_NONE, &src) != BT_GRAPH_ADD_COMPONENT_STATUS_OK ||
        bt_graph_add_filter_component(g, bt_plugin_borrow_filter_component_class_by_name_const(utils, "muxer"), "mux",
                                      NULL, BT_LOGGING_LEVEL_NONE, &mux) != BT_GRAPH_ADD_COMPONENT_STATUS_OK ||
        bt_graph_add_simple_sink_component(g, "sink", NULL, consume, NULL, st, &sink) !=
            BT_GRAPH_ADD_COMPONENT_STATUS_OK) {
        error_text(err, err_size);
        goto out;
    }
    for (uint64_t i = 0; i < bt_component_source_get_output_port_count(src); i++) {
        const bt_port_output *op = bt_component_source_borrow_output_port_by_index_const(src, i);
        const bt_port_input *ip = bt_component_filter_borrow_input_port_by_index_const(
            mux, bt_component_filter_get_input_port_count(mux) - 1);
        if (bt_graph_connect_ports(g, op, ip, NULL) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
            error_text(err, err_size);
            goto out;
        }
    }
    if (bt_graph_connect_ports(g, bt_component_filter_borrow_output_port_by_index_const(mux, 0),
                               bt_component_sink_borrow_input_port_by_index_const(sink, 0),
                               NULL) != BT_GRAPH_CONNECT_PORTS_STATUS_OK) {
        error_text(err, err_size);
        goto out;
    }
    bt_graph_run_status rs;
    while ((rs = bt_graph_run(g)) == BT_GRAPH_RUN_STATUS_AGAIN)
        ;
    if (rs != BT_GRAPH_RUN_STATUS_OK)
        error_text(err, err_size);
out:
    bt_value_put_ref(params);
    bt_value_put_ref(inputs);
    bt_graph_put_ref(g);
    bt_plugin_put_ref(ctf);
    bt_plugin_put_ref(utils);
}

/* This process's own peak RSS in KiB (VmHWM of its address space: getrusage's figure would include
 * the spawning process's pages, shared until exec). -1 when unknown. */
static long peak_rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ctfcols OUT_DIR TRACE_DIR...\n");
        return 2;
    }
    const char *out = argv[1];
    char path[4096];
    for (int c = 0; c < NCOL; c++) {
        snprintf(path, sizeof path, "%s/%s.bin", out, col_name[c]);
        col_file[c] = fopen(path, "wb");
        if (!col_file[c]) {
            fprintf(stderr, "ctfcols: cannot write %s: %s\n", path, strerror(errno));
            return 2;
        }
        setvbuf(col_file[c], NULL, _IOFBF, 1 << 18);
    }
    struct state st = { .src = 0, .last_cpu = -1, .freq = 1000000000ull };
    char err[2048] = "", refused[1024] = "";
    struct ctfread_reader *own = NULL;
    /* RPCSCOPE_CTFREAD=0: libbabeltrace2 only (to compare the two, as the tests do) */
    const char *use_own = getenv("RPCSCOPE_CTFREAD");
    if (use_own && !strcmp(use_own, "0"))
        snprintf(refused, sizeof refused, "RPCSCOPE_CTFREAD=0");
    else if (read_own(argv + 2, argc - 2, &st, &own, refused, sizeof refused))
        start_over(&st);
    if (refused[0])
        read_bt(argv + 2, argc - 2, &st, err, sizeof err);
    flush_rows();
    for (int c = 0; c < NCOL; c++)
        if (fclose(col_file[c]) || write_failed) {
            fprintf(stderr, "ctfcols: write error: %s\n", strerror(errno));
            return 2;
        }
    snprintf(path, sizeof path, "%s/meta.json", out);
    FILE *m = fopen(path, "w");
    if (!m) {
        fprintf(stderr, "ctfcols: cannot write %s\n", path);
        return 2;
    }
    fprintf(m, "{\"events\": %" PRIu64 ", \"peak_rss_kib\": %ld, \"names\": [", st.events, peak_rss_kib());
    for (size_t i = 0; i < n_names; i++) {
        fputs(i ? ", " : "", m);
        json_str(m, names[i]);
    }
    fputs("], \"threads\": {", m);
    for (size_t i = 0; i < n_threads; i++) {
        fprintf(m, "%s\"%d\": {\"pid\": %d, \"procname\": ", i ? ", " : "", threads[i].tid, threads[i].pid);
        json_str(m, names[threads[i].procname]);
        fputc('}', m);
    }
    fprintf(m, "}, \"problems\": [%s], \"reader\": ", problems ? problems : "");
    json_str(m, refused[0] ? "libbabeltrace2" : "ctfread");
    fputs(", \"ctfread_refused\": ", m);
    json_str_or_null(m, refused[0] ? refused : NULL);
    fputs(", \"clock\": ", m);
    if (st.have_clock) {
        const struct ctfread_clock *c = &st.clock_copy;
        json_clock(m, c->name, c->have_uuid ? c->uuid : NULL, c->freq, c->origin_is_unix_epoch, c->offset_s,
                   c->offset_cycles);
    } else {
        fputs("null", m);
    }
    fputs(", \"error\": ", m);
    json_str_or_null(m, err[0] ? err : NULL);
    fputs("}\n", m);
    fclose(m);
    ctfread_close(own);
    return err[0] ? 1 : 0;
}
