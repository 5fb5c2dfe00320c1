/* Transport plumbing shared by client and server: sockets, the test-only
 * seeded drop of outgoing datagrams, and TCP record marking. */
#ifndef RPCS_XPORT_H
#define RPCS_XPORT_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum xport_kind { XPORT_UDP = 0, XPORT_TCP = 1 };

#define XPORT_DEFAULT_PORT 7100
#define XPORT_SOCKBUF (4 << 20)
/* TCP record mark: high bit = last record of the message, low 31 bits = length. */
#define XPORT_MARK_LAST 0x80000000u

/* Test-only packet loss: each datagram sent is dropped with probability rate. */
struct xport_drop {
    double rate;
    struct util_rng rng;
    uint64_t dropped;
};

int xport_parse_kind(const char *s, int *kind);
const char *xport_kind_name(int kind);
int xport_resolve(const char *addr, uint16_t port, struct sockaddr_in *out);

/* A UDP socket bound to local (port 0 = any) and, if peer is not NULL, connected to it. */
int xport_udp_socket(const struct sockaddr_in *local, const struct sockaddr_in *peer, int *fd);
int xport_tcp_listen(const struct sockaddr_in *local, int *fd);
int xport_tcp_connect(const struct sockaddr_in *peer, int *fd);

/* Send one datagram (to addr, or on a connected socket if addr is NULL); the drop
 * option may swallow it, which looks to the caller like a loss on the wire. */
int xport_udp_send(int fd, const void *buf, size_t len, const struct sockaddr_in *addr, struct xport_drop *drop);
/* The same for a datagram gathered from iov[n]. */
struct iovec;
int xport_udp_sendv(int fd, const struct iovec *iov, int n, const struct sockaddr_in *addr, struct xport_drop *drop);
/* Write all of buf to a stream socket, waiting up to timeout_ms for room. */
int xport_write_all(int fd, const void *buf, size_t len, int timeout_ms);

void xport_put_mark(uint8_t *p, uint32_t len);
uint32_t xport_get_mark(const uint8_t *p, int *last);

#endif
