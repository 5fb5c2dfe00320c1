/* The peers' client harness: the same workloads, result checks, thread and CPU
 * options and JSON summary as rpc-client, for RPC systems other than the
 * reference one (libtirpc, gRPC). A peer gives three functions: connect (one
 * binding per thread), call (one call of the configured procedure, its result
 * decoded into a pb_result) and close; pb_main does the rest.
 *
 * Procedures (the seeds' workloads, named as rpc-client names them):
 *   null()                    nothing in, nothing out
 *   add(i32, i32) -> i32      Netwise "add"
 *   sum(i32[size]) -> i64     Netwise "integer 100 / 1000"
 *   concat(string, string) -> string   Netwise "string" (size bytes in all)
 *   echo(opaque size) -> opaque size   Netwise "opaque"
 *   maxarg(opaque size)       Firefly MaxArg, DCE's send
 *   maxresult(size) -> opaque size     Firefly MaxResult
 */
#ifndef PEERBENCH_H
#define PEERBENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum pb_proc { PB_NULL, PB_ADD, PB_SUM, PB_CONCAT, PB_ECHO, PB_MAXARG, PB_MAXRESULT, PB_PROC_COUNT };
enum pb_transport { PB_UDP, PB_TCP };

#define PB_MAX_THREADS 64
#define PB_MAX_SIZE (1u << 20)

/* What a call's outcome is: the result matched, it did not, or the call failed. */
enum { PB_OK = 0, PB_MISMATCH = 1, PB_ERROR = 2 };

struct pb_config {
    const char *peer;   /* "tirpc", "grpc": names the JSON's source */
    const char *server; /* IPv4 address */
    int port;           /* 0: the peer finds it (rpcbind) */
    int transport;
    int proc;
    uint32_t size;
    uint64_t calls, warmup;
    int threads;
    int cpus[PB_MAX_THREADS];
    int ncpus;
    double max_seconds;
    double deadline_s; /* give one call up after this long */
    int json;
};

/* One thread's arguments, built once: the call's varying part is seq. */
struct pb_work {
    uint32_t size, seq;
    uint8_t *data; /* echo, maxarg: size bytes, seq in the first 4 */
    int32_t *ints; /* sum: size ints */
    int64_t int_sum;
    char *s1, *s2; /* concat: NUL-terminated halves of size bytes */
    uint32_t len1, len2;
    int32_t a, b; /* add */
};

/* A call's decoded result (the fields its procedure returns). */
struct pb_result {
    int32_t i;
    int64_t sum;
    const uint8_t *data;
    uint32_t len;
};

struct pb_ops {
    /* A binding for one thread; NULL with a message in err on failure. */
    void *(*connect)(const struct pb_config *cfg, char *err, size_t errlen);
    /* One call of cfg->proc with w's arguments; fills r. PB_OK, or PB_ERROR with a message. */
    int (*call)(void *conn, const struct pb_config *cfg, const struct pb_work *w, struct pb_result *r, char *err,
                size_t errlen);
    void (*close)(void *conn);
};

/* Parse the options (transports: "udp,tcp" or "tcp", what the peer speaks), run the calls,
 * check every result, print the summary; the program's exit status. */
int pb_main(int argc, char **argv, const char *peer, const char *transports, const struct pb_ops *ops);

const char *pb_proc_name(int proc);
/* The bytes maxresult(n) returns, as the reference RPC's: both sides can check them. */
uint8_t pb_pattern_byte(uint32_t i);

/* Pin the calling thread (or, before threads start, the process) to cpu; 0 or -1 (errno set). */
int pb_pin_cpu(int cpu);
/* Server helpers: parse "--cpu N --duration S --ready-file PATH --port N --bind ADDR" style
 * numbers and write the ready file ("PID PORT\n") atomically; 0 or -1 with a message on stderr. */
int pb_write_ready(const char *path, int port);

#ifdef __cplusplus
}
#endif

#endif
