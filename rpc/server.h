/* The server: a listener thread (poll + recvfrom; reassembly, window
 * acknowledgements, at-most-once checks) that hands each complete call to a
 * pool of executor threads (S5), or runs it itself in inline mode. Every
 * length and count from the network is checked before it is trusted; bad
 * input is rejected or dropped and counted, never allowed to crash, hang or
 * grow memory without bound.
 *
 * Fair sharing and no amplification:
 *  - TCP: a connection with no byte for tcp_idle_ms, or whose partial record
 *    (or record mark) gets no byte for tcp_progress_ms, is closed. One source
 *    address holds at most conns_per_source connections, all sources at most
 *    max_conns; a new connection over either bound takes the place of the
 *    connection with no complete record for longest, if that is at least
 *    tcp_evict_ms, and is refused otherwise. Every close is counted by reason.
 *  - UDP: reassembly slots are shared as reasm.h says (reasm_per_source,
 *    reasm_evict_ms); a call that gets no slot is answered with a busy reject.
 *  - A reply, first or cached, goes only to the source (address and port) its
 *    call came from. A reply more than SERVER_AMPLIFY_MAX times the size of its
 *    request (in datagram bytes) goes out at once only to a source that has
 *    acknowledged a reply of the activity before; any other source gets an
 *    ACKREQ PDU (80 bytes) carrying a cookie, and the reply follows the
 *    client's ACK that echoes it (a reply larger than the reply cache's bound
 *    cannot wait: it gets a busy reject). A duplicate request or a ping re-sends at most
 *    one window (WIRE_WINDOW_MAX bytes) of a cached reply, from the fragment the
 *    client says it lacks, and only to an acknowledged source; others get the
 *    ACKREQ again. So a source that never acknowledges receives at most
 *    SERVER_AMPLIFY_MAX times the bytes it sent. */
#ifndef RPCS_SERVER_H
#define RPCS_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SERVER_MAX_CPUS 16
/* A reply larger than this many times its request waits for the client's acknowledgement. */
#define SERVER_AMPLIFY_MAX 8u

struct server_config {
    const char *bind;
    uint16_t port;
    int udp, tcp;              /* which transports to serve */
    int executors;             /* 0: inline mode */
    int nb_select;             /* DCE's zero-timeout select before the blocking one (S12) */
    int stub_variant;          /* stubcall variant for the stub study's procedures */
    int wait_recv;             /* UDP only: the listener sleeps in a blocking recvfrom, no select */
    int cpus[SERVER_MAX_CPUS]; /* listener first, then executors, round robin */
    int ncpus;
    uint32_t max_pdu, max_msg;
    uint32_t reply_cache; /* entries */
    size_t reply_bytes;   /* bytes of cached replies */
    uint32_t reasm_slots;
    size_t reasm_bytes;
    uint32_t reasm_timeout_ms;
    uint32_t queue;            /* calls waiting for an executor */
    uint32_t reasm_per_source; /* reassembly slots one source address may hold */
    uint32_t reasm_evict_ms;   /* a partial request idle this long may be evicted for a new one */
    uint32_t max_conns;        /* TCP connections */
    uint32_t conns_per_source; /* TCP connections one source address may hold */
    uint32_t tcp_idle_ms;      /* close a connection with no byte for this long (0: never) */
    uint32_t tcp_progress_ms;  /* close a connection whose partial record gets no byte for this long (0: never) */
    uint32_t tcp_evict_ms;     /* a connection with no complete record for this long may make room for a new one */
    double duration;           /* seconds; 0 = until signalled */
    const char *ready_file, *stats_json;
    double drop_rate; /* test only */
    uint64_t drop_seed;
};

/* Every counter the server keeps; printed on exit and on SIGUSR1.
 *   reassembly_full       new calls that found their source's share or the table full; of them
 *   reassembly_evicted    the ones that took an idle call's slot, and
 *   reassembly_busy       the ones refused with a busy reject
 *   wrong_source          fragments, duplicates and pings for a call from another source than the call's
 *   replies_held          replies held until the client acknowledges (an ACKREQ sent instead)
 *   reply_acks            client ACKs with a good cookie; reply_windows: windows re-sent from the cache
 *   reply_evictions       cached replies dropped to make room for newer ones
 *   tcp_closed            every close, = tcp_peer_closed + tcp_bad_record + tcp_idle_timeouts +
 *                         tcp_progress_timeouts + tcp_evicted + tcp_no_memory + tcp_closed_at_exit
 *   tcp_refused           connections refused (all bounds); tcp_refused_per_source: of them, at the
 *                         per-source bound */
/* One counter after another, as many to a line as fit (clang-format would stair-step them). */
/* clang-format off */
#define SERVER_STATS(X)                                                                    \
    X(datagrams) X(requests) X(executed) X(replies_sent) X(oneway) X(answered_from_cache) \
    X(duplicate_while_running) X(old_calls) X(malformed) X(bad_fragment) X(too_big)      \
    X(unknown_proc) X(bad_args) X(reassembly_full) X(reassembly_conflict)                \
    X(reassembly_expired) X(fragments_stored) X(duplicate_fragments) X(acks_sent)        \
    X(pings) X(rejects_sent) X(busy) X(unexpected_type) X(tcp_accepted) X(tcp_closed)    \
    X(tcp_refused) X(tcp_bad_record) X(send_errors)                                     \
    X(reassembly_evicted) X(reassembly_busy) X(wrong_source) X(replies_held)             \
    X(reply_acks) X(reply_windows) X(reply_evictions) X(tcp_refused_per_source)          \
    X(tcp_evicted) X(tcp_idle_timeouts) X(tcp_progress_timeouts) X(tcp_peer_closed)      \
    X(tcp_no_memory) X(tcp_closed_at_exit) X(dropped_by_test_option)                     \
    X(voluntary_switches) X(involuntary_switches)
/* clang-format on */

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
/* The counters as text (one per line) or as one JSON object, in one write;
 * with cfg, the JSON also holds the sharing limits in force ("limits"). */
void server_print_stats(const struct server_stats *st, const struct server_config *cfg, FILE *f, int json);

#endif
