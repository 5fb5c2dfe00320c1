/*
 * ctfread: rpcscope's own reader of CTF 1.8 traces, for ctfcols's first pass.
 *
 * libbabeltrace2 decodes at about 2 M events/s on this machine; the layouts rpcscope's tracers
 * write (LTTng-UST, `perf data convert --to-ctf`, rpcscope's ftrace converter, bt2's sink.ctf.fs)
 * are little-endian structures of integers, enumerations, strings, arrays and variants that a
 * direct interpreter decodes many times faster. Anything outside that subset (big-endian data,
 * floating point, a variant tag outside its structure, a packet-sequence gap, discarded events
 * before a stream's first packet, a packet that does not fit its file) is refused with
 * CTFREAD_UNSUPPORTED and a reason before any event is returned, or with CTFREAD_FALLBACK while
 * reading (a corrupt event): the caller then decodes the trace with libbabeltrace2 instead, which
 * owns every error message and the salvage of damaged streams.
 *
 *     struct ctfread_reader *r;
 *     if (ctfread_open(dirs, n, &r, why, sizeof why) == CTFREAD_OK)
 *         while ((s = ctfread_next(r, &ev, why, sizeof why)) == 1)
 *             use(ev->cls, ev->ts, ev->cpu, ev->payload, ev->common);
 *     ctfread_close(r);
 *
 * Events come in time order across every stream of every trace (ties: the stream that sorts first
 * by trace, then file name). Timestamps are raw clock values, as babeltrace2's clock snapshots.
 */
#ifndef RPCSCOPE_CTFREAD_H
#define RPCSCOPE_CTFREAD_H

#include <stddef.h>
#include <stdint.h>

enum ctfread_status { CTFREAD_OK = 0, CTFREAD_UNSUPPORTED = 1, CTFREAD_FALLBACK = 2 };

struct ctfread_type;
struct ctfread_class;
struct ctfread_reader;

/* One decoded top-level structure of an event (its payload, or its stream's event context): the
 * value of member i is ival[i] (integers and enumerations) or sval[i] (strings and character arrays,
 * NULL otherwise). */
struct ctfread_scope {
    const struct ctfread_type *type; /* NULL: the event has no such structure */
    int64_t *ival;
    const char **sval;
};

struct ctfread_event {
    uint64_t ts; /* raw value of the stream's clock */
    int cpu;     /* packet context's cpu_id; -1 without one */
    const struct ctfread_class *cls;
    struct ctfread_scope payload, common;
};

struct ctfread_clock {
    const char *name;
    int have_uuid;
    uint8_t uuid[16];
    uint64_t freq;
    int64_t offset_s;
    uint64_t offset_cycles;
    int origin_is_unix_epoch;
};

struct ctfread_discarded {
    uint64_t count, begin, end; /* raw clock values: previous packet's end, this packet's end */
};

int ctfread_open(char *const *dirs, int n_dirs, struct ctfread_reader **out, char *why, size_t why_size);
/* 1: *ev is the next event (valid until the next call); 0: end of the traces; -CTFREAD_FALLBACK. */
int ctfread_next(struct ctfread_reader *r, const struct ctfread_event **ev, char *why, size_t why_size);
void ctfread_close(struct ctfread_reader *r);

const char *ctfread_class_name(const struct ctfread_class *cls);
const struct ctfread_type *ctfread_class_payload(const struct ctfread_class *cls);
const struct ctfread_type *ctfread_class_common(const struct ctfread_class *cls);
/* Index of a structure's member by name (a leading underscore of the metadata's name dropped, as
 * CTF 1.8 and babeltrace2 do); -1 when the structure has no such member or type is NULL. */
int ctfread_member(const struct ctfread_type *type, const char *name);
/* What member i holds: 'i' an integer or enumeration, 's' a string or character array, 0 else. */
char ctfread_member_kind(const struct ctfread_type *type, int i);
/* The clock of the first event's stream (NULL before the first event or without a clock). */
const struct ctfread_clock *ctfread_event_clock(const struct ctfread_reader *r);
/* Discarded-event records seen so far, in the order of their begin time. */
size_t ctfread_discarded(const struct ctfread_reader *r, const struct ctfread_discarded **list);

#endif
