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
    PROC_COUNT
};

struct proc_args {
    uint32_t n;           /* maxresult: bytes wanted */
    int32_t a, b;         /* add */
    const int32_t *ints;  /* sum */
    uint32_t nints;
    const char *s1, *s2;  /* concat */
    uint32_t len1, len2;
    const uint8_t *data;  /* maxarg, echo, courier */
    uint32_t len;
    const void *value;    /* a stub-study procedure's argument record (see stubcall.h) */
};

struct proc_result {
    uint64_t counter;     /* incr */
    int32_t i;            /* add, echo (length), courier */
    int64_t sum;          /* sum */
    const uint8_t *data;  /* maxresult, echo, concat: points into the reply buffer */
    uint32_t len;
    uint32_t checksum;    /* stub-study procedures: of the value the server unmarshalled */
};

struct client;

/* Buffers a server thread needs to run any procedure. */
size_t proc_value_cap(void);

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
    int stub_variant; /* how the server unmarshals stub-study procedures */
};
/* A procedure id the RPC serves: its own ones, or the stub study's. */
int proc_valid(int proc);
int proc_serve(struct proc_server *srv, int proc, uint64_t call_id, struct marshal_dec *args,
               struct marshal_enc *res, int32_t *int_scratch, uint32_t int_cap, uint8_t *byte_scratch,
               uint32_t byte_cap);

/* The bytes maxresult(n) returns: a fixed pattern both sides can check. */
uint8_t proc_pattern_byte(uint32_t i);

#endif
