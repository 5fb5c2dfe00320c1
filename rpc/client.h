/* The client runtime: one binding per client thread (its own socket and
 * activity id), and the call path from call start (C2) to free (C20):
 * packet setup, memory copy, queue, windowed send with acknowledgements,
 * waiting (blocking or busy-poll), receive and reassembly of the reply,
 * retransmission after a timeout. */
#ifndef RPCS_CLIENT_H
#define RPCS_CLIENT_H

#include <netinet/in.h>
#include <stdint.h>

#include "marshal.h"
#include "xport.h"

#define CLIENT_DEFAULT_MAX_MSG (256u << 10)

/* How a client waits for its reply. SELECT is DCE's structure: a select
 * (epoll_wait) that sleeps (C14-C17), then recvfrom (C18). RECV sleeps inside
 * a blocking recvfrom with a receive timeout, as sockperf does: one syscall
 * less and a cheaper wake-up, but the select steps C11 and C17 do not exist
 * and C18 begins when the kernel switches the thread back in. BUSY spins on
 * a zero-timeout select. */
enum client_wait { CLIENT_WAIT_SELECT = 0, CLIENT_WAIT_RECV = 1, CLIENT_WAIT_BUSY = 2 };
int client_parse_wait(const char *s, int *wait);
const char *client_wait_name(int wait);

struct client_config {
    const char *server;
    uint16_t port;
    int transport;        /* XPORT_UDP or XPORT_TCP */
    uint32_t max_pdu;     /* UDP PDU limit, header included */
    uint32_t max_msg;     /* largest request or reply body */
    uint8_t drep;         /* wire byte order */
    int wait;             /* CLIENT_WAIT_*: how the client waits for a reply */
    int stub_variant;     /* the variant plugged-in procedures marshal with (procs.h) */
    int nb_select;        /* DCE's zero-timeout select before the blocking wait (C11) */
    uint32_t rexmit_ms;   /* wait this long before asking the server what it has */
    uint32_t deadline_ms; /* give a call up after this long */
    double drop_rate;     /* test only: drop this share of datagrams sent */
    uint64_t drop_seed;
};

struct client_stats {
    uint64_t calls, timeouts, pings, retransmitted_frags, stale_packets, bad_packets, acks, rejects;
    char first_bad[160]; /* why the first bad packet was dropped ("" if none was) */
};

struct client {
    struct client_config cfg;
    int fd, epfd; /* the socket, and an epoll set holding it: the select of C11 and C14 */
    struct sockaddr_in peer;
    uint8_t activity[16];
    uint32_t seq;
    uint64_t call_id;
    uint16_t proc;
    int oneway;
    uint8_t *tx;      /* the queued request: fragments of max_pdu bytes (UDP) or one record (TCP) */
    uint8_t *scratch; /* marshalling scratch */
    uint8_t *rx;      /* the reassembled reply body */
    uint8_t *pkt;     /* one received datagram or TCP record */
    uint8_t *rxmap;   /* reply fragments received */
    size_t tx_cap, rx_cap, pkt_cap;
    struct marshal_enc enc;
    struct xport_drop drop;
    struct client_stats stats;
};

void client_config_defaults(struct client_config *cfg);
int client_open(struct client *c, const struct client_config *cfg, uint64_t activity_seed);
void client_close(struct client *c);

/* The call id the next call will carry (the stub traces C1 with it). */
uint64_t client_next_call_id(const struct client *c);
/* C2: make the call handle; returns the encoder the stub marshals into (C3). */
int client_call_start(struct client *c, uint16_t proc, int oneway, struct marshal_enc **enc);
/* C4..C18 (and C22): send the request, wait, receive the reply; on success
 * *result decodes the reply body. A one-way call returns once sent. */
int client_call_invoke(struct client *c, struct marshal_dec *result);
/* C20: release the call. */
void client_call_end(struct client *c);

#endif
