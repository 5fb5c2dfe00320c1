/* The procedures the reference RPC serves (the seeds' workloads), their
 * client stubs and server skeletons.
 *
 *   null()                    DCE's base latency
 *   incr() -> u64             a server-side counter: not idempotent, so it
 *                             shows whether at-most-once holds
 *   maxarg(opaque n)          Firefly MaxArg
 *   maxresult(n) -> opaque n  Firefly MaxResult
 *   add(i32, i32) -> i32      Netwise "add"
 *   sum(i32[n]) -> i64        Netwise "integer 100 / 1000"
 *   concat(string, string) -> string       Netwise "string"
 *   echo(opaque n) -> (opaque n, i32 n)    Netwise "opaque 4000/8000/16000"
 *   courier(opaque n) -> i32  Courier with a result
 *   courier_oneway(opaque n)  Courier without a result: the client does not wait
 *   fixedarg(byte[n])         DCE's throughput call: a fixed-size array of n
 *                             characters, the whole body with no count (the
 *                             interface fixes n), no result
 *
 * Other procedures plug in through procs_register (the stub study does, from
 * stubs/rpc/stubcall.c): ids from PROCS_PLUGIN_BASE on. Their argument is a value
 * the table marshals in one of its variants; the server's procedure returns a
 * checksum of the value it unmarshalled and the value's wire length, which the
 * client checks.
 */
#ifndef RPCS_PROCS_H
#define RPCS_PROCS_H

#include <stdint.h>

#include "marshal.h"

enum proc_id {
    PROC_NULL = 0,
    PROC_INCR,
    PROC_MAXARG,
    PROC_MAXRESULT,
    PROC_ADD,
    PROC_SUM,
    PROC_CONCAT,
    PROC_ECHO,
    PROC_COURIER,
    PROC_COURIER_ONEWAY,
    PROC_FIXEDARG,
    PROC_COUNT
};

struct proc_args {
    uint32_t n;          /* maxresult: bytes wanted */
    int32_t a, b;        /* add */
    const int32_t *ints; /* sum */
    uint32_t nints;
    const char *s1, *s2; /* concat */
    uint32_t len1, len2;
    const uint8_t *data; /* maxarg, echo, courier, fixedarg */
    uint32_t len;
    const void *value; /* a plugged-in procedure's argument value */
};

struct proc_result {
    uint64_t counter;    /* incr */
    int32_t i;           /* add, echo (length), courier */
    int64_t sum;         /* sum */
    const uint8_t *data; /* maxresult, echo, concat: points into the reply buffer */
    uint32_t len;
    uint32_t checksum; /* plugged-in procedures: of the value the server unmarshalled */
};

struct client;

#define PROCS_PLUGIN_BASE 16
#define PROCS_PLUGIN_MAX 64

/* A set of procedures plugged in beside the RPC's own. Every function fails with a
 * UTIL_* code and a message (util_error). */
struct procs_table {
    int (*count)(void); /* ids PROCS_PLUGIN_BASE .. PROCS_PLUGIN_BASE + count() - 1 */
    const char *(*name)(int proc);
    int (*by_name)(const char *name); /* -1: none of the table's */
    size_t (*value_size)(int proc);   /* bytes of the argument value in memory */
    size_t (*wire_max)(int proc);     /* the most bytes the marshalled value takes */
    int (*parse_variant)(const char *s, int *variant);
    /* Whether `variant` can marshal in the byte order drep names. */
    int (*check_variant)(int variant, uint8_t drep);
    int (*marshal)(int proc, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len, uint8_t drep);
    int (*unmarshal)(int proc, int variant, void *value, const uint8_t *buf, size_t len, uint8_t drep);
    /* The server's procedure: FNV-1a of the value's canonical encoding, built in scratch. */
    int (*checksum)(int proc, const void *value, uint8_t *scratch, size_t cap, uint32_t *sum);
    /* A call's argument: fill value (value_size bytes) from seed; *sum and *wire_len are
     * what the server returns for it. */
    int (*sample)(int proc, void *value, uint64_t seed, uint32_t *sum, uint32_t *wire_len);
};

/* Plug a table in (once per process, before any call or server). */
int procs_register(const struct procs_table *t);
/* The plugged-in table, or NULL. */
const struct procs_table *procs_plugin(void);
int proc_is_plugin(int proc);
/* A variant of the plugged-in procedures; fails if none are plugged in. */
int proc_parse_variant(const char *s, int *variant);

const char *proc_name(int proc);
int proc_by_name(const char *name);
int proc_is_oneway(int proc);
/* Largest workload size the procedure accepts for a message limit of max_msg. */
uint32_t proc_max_size(int proc, uint32_t max_msg);

/* Client stub: steps C1 (entry), C3 (marshal), C19 (unmarshal), C21 (return);
 * the runtime does the rest. The result's pointers stay valid until the next call. */
int proc_call(struct client *c, int proc, const struct proc_args *a, struct proc_result *r);

/* Server skeleton: unmarshal (end of S5), run the procedure (S6), marshal the
 * result (S7). Fails with UTIL_EPROTO on bad arguments (the caller rejects). */
struct proc_server {
    uint64_t counter; /* incr's state, updated atomically */
    int stub_variant; /* the variant that unmarshals plugged-in procedures */
};
/* A procedure id the RPC serves: its own ones, or a plugged-in one. */
int proc_valid(int proc);
int proc_serve(struct proc_server *srv, int proc, uint64_t call_id, struct marshal_dec *args, struct marshal_enc *res,
               int32_t *int_scratch, uint32_t int_cap, uint8_t *byte_scratch, uint32_t byte_cap);

/* The bytes maxresult(n) returns: a fixed pattern both sides can check. */
uint8_t proc_pattern_byte(uint32_t i);

#endif
