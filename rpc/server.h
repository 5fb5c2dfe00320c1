/* The server: a listener thread (poll + recvfrom; reassembly, window
 * acknowledgements, at-most-once checks) that hands each complete call to a
 * pool of executor threads (S5), or runs it itself in inline mode. Every
 * length and count from the network is checked before it is trusted; bad
 * input is rejected or dropped and counted, never allowed to crash, hang or
 * grow memory without bound. */
#ifndef RPCS_SERVER_H
#define RPCS_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SERVER_MAX_CPUS 16

struct server_config {
    const char *bind;
    uint16_t port;
    int udp, tcp;               /* which transports to serve */
    int executors;              /* 0: inline mode */
    int nb_select;              /* DCE's zero-timeout select before the blocking one (S12) */
    int stub_variant;           /* stubcall variant for the stub study's procedures */
    int wait_recv;              /* UDP only: the listener sleeps in a blocking recvfrom, no select */
    int cpus[SERVER_MAX_CPUS];  /* listener first, then executors, round robin */
    int ncpus;
    uint32_t max_pdu, max_msg;
    uint32_t reply_cache;       /* entries */
    size_t reply_bytes;         /* bytes of cached replies */
    uint32_t reasm_slots;
    size_t reasm_bytes;
    uint32_t reasm_timeout_ms;
    uint32_t queue;             /* calls waiting for an executor */
    uint32_t max_conns;         /* TCP connections */
    double duration;            /* seconds; 0 = until signalled */
    const char *ready_file, *stats_json;
    double drop_rate;           /* test only */
    uint64_t drop_seed;
};

/* Every counter the server keeps; printed on exit and on SIGUSR1. */
#define SERVER_STATS(X)                                                                    \
    X(datagrams) X(requests) X(executed) X(replies_sent) X(oneway) X(answered_from_cache) \
    X(duplicate_while_running) X(old_calls) X(malformed) X(bad_fragment) X(too_big)      \
    X(unknown_proc) X(bad_args) X(reassembly_full) X(reassembly_conflict)                \
    X(reassembly_expired) X(fragments_stored) X(duplicate_fragments) X(acks_sent)        \
    X(pings) X(rejects_sent) X(busy) X(unexpected_type) X(tcp_accepted) X(tcp_closed)    \
    X(tcp_refused) X(tcp_bad_record) X(send_errors) X(dropped_by_test_option)           \
    X(voluntary_switches) X(involuntary_switches)

struct server_stats {
#define SERVER_STAT_FIELD(name) uint64_t name;
    SERVER_STATS(SERVER_STAT_FIELD)
#undef SERVER_STAT_FIELD
};

struct server;

void server_config_defaults(struct server_config *cfg);
int server_create(const struct server_config *cfg, struct server **out);
/* Run the listener on the calling thread until stopped or the duration ends. */
int server_run(struct server *s);
void server_destroy(struct server *s);
/* Async-signal-safe requests to the running listener. */
void server_request_stop(struct server *s);
void server_request_stats(struct server *s);
void server_get_stats(struct server *s, struct server_stats *out);
void server_print_stats(const struct server_stats *st, FILE *f, int json);

#endif
