#include "xport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int xport_parse_kind(const char *s, int *kind)
{
    if (!strcmp(s, "udp"))
        *kind = XPORT_UDP;
    else if (!strcmp(s, "tcp"))
        *kind = XPORT_TCP;
    else
        return util_fail(UTIL_EINVAL, "unknown transport '%s' (use udp or tcp)", s);
    return UTIL_OK;
}

const char *xport_kind_name(int kind) { return kind == XPORT_TCP ? "tcp" : "udp"; }

int xport_resolve(const char *addr, uint16_t port, struct sockaddr_in *out)
{
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons(port);
    if (inet_pton(AF_INET, addr, &out->sin_addr) != 1)
        return util_fail(UTIL_EINVAL, "'%s' is not an IPv4 address", addr);
    return UTIL_OK;
}

static void set_bufs(int fd)
{
    int sz = XPORT_SOCKBUF;
    /* Best effort: a smaller buffer only means more loss under a flood. */
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
}

static int bind_to(int fd, const struct sockaddr_in *local, const char *kind)
{
    char a[INET_ADDRSTRLEN];
    if (bind(fd, (const struct sockaddr *)local, sizeof *local) == 0)
        return UTIL_OK;
    inet_ntop(AF_INET, &local->sin_addr, a, sizeof a);
    return util_fail_errno("bind(%s %s:%u)", kind, a, ntohs(local->sin_port));
}

/* With no server on the peer's port, connect may give the socket that very port (loopback): it would then
 * talk to itself, every request coming back as if it were an answer. */
static int check_not_self(int fd, const struct sockaddr_in *peer, const char *kind)
{
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    char a[INET_ADDRSTRLEN];
    if (getsockname(fd, (struct sockaddr *)&me, &len) < 0)
        return util_fail_errno("getsockname(%s)", kind);
    if (me.sin_port != peer->sin_port || me.sin_addr.s_addr != peer->sin_addr.s_addr)
        return UTIL_OK;
    inet_ntop(AF_INET, &peer->sin_addr, a, sizeof a);
    return util_fail(UTIL_EINVAL,
                     "connect(%s %s:%u) gave the socket that same address: no server is there; "
                     "start rpc-server first or check --server/--port",
                     kind, a, ntohs(peer->sin_port));
}

int xport_udp_socket(const struct sockaddr_in *local, const struct sockaddr_in *peer, int *out)
{
    int rc = UTIL_OK;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return util_fail_errno("socket(AF_INET, SOCK_DGRAM)");
    set_bufs(fd);
    /* No SO_REUSEADDR on UDP: there it lets a second socket bind a port in use, and a client socket
     * that had it was once given the server's own port by connect's autobind, then received its own
     * requests back (loopback, 1 client in ~28000: a flaky timeout in the tests). */
    if (local && (rc = bind_to(fd, local, "udp")))
        goto out;
    if (peer && connect(fd, (const struct sockaddr *)peer, sizeof *peer) < 0) {
        rc = util_fail_errno("connect(udp)");
        goto out;
    }
    if (peer && (rc = check_not_self(fd, peer, "udp")))
        goto out;
    *out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

int xport_tcp_listen(const struct sockaddr_in *local, int *out)
{
    int rc = UTIL_OK, one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return util_fail_errno("socket(AF_INET, SOCK_STREAM)");
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if ((rc = bind_to(fd, local, "tcp")))
        goto out;
    if (listen(fd, 128) < 0) {
        rc = util_fail_errno("listen(tcp)");
        goto out;
    }
    *out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

int xport_tcp_connect(const struct sockaddr_in *peer, int *out)
{
    int rc = UTIL_OK, one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return util_fail_errno("socket(AF_INET, SOCK_STREAM)");
    set_bufs(fd);
    if (connect(fd, (const struct sockaddr *)peer, sizeof *peer) < 0) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &peer->sin_addr, a, sizeof a);
        rc = util_fail_errno("connect(tcp %s:%u)", a, ntohs(peer->sin_port));
        goto out;
    }
    if ((rc = check_not_self(fd, peer, "tcp"))) /* TCP's simultaneous open lets a socket meet itself */
        goto out;
    /* One small request must leave at once, not wait for Nagle. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) {
        rc = util_fail_errno("setsockopt(TCP_NODELAY)");
        goto out;
    }
    *out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

int xport_udp_send(int fd, const void *buf, size_t len, const struct sockaddr_in *addr, struct xport_drop *drop)
{
    ssize_t n;
    if (drop && drop->rate > 0 && util_rng_unit(&drop->rng) < drop->rate) {
        drop->dropped++;
        return UTIL_OK;
    }
    do {
        n = addr ? sendto(fd, buf, len, 0, (const struct sockaddr *)addr, sizeof *addr) : send(fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        /* A full socket buffer or a refused port is a loss the protocol recovers from. */
        if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED)
            return UTIL_OK;
        return util_fail_errno("sendto(udp, %zu bytes)", len);
    }
    return UTIL_OK;
}

int xport_udp_sendv(int fd, const struct iovec *iov, int n, const struct sockaddr_in *addr, struct xport_drop *drop)
{
    struct msghdr msg = { .msg_name = (void *)addr,
                          .msg_namelen = addr ? sizeof *addr : 0,
                          .msg_iov = (struct iovec *)iov,
                          .msg_iovlen = (size_t)n };
    ssize_t sent;
    if (drop && drop->rate > 0 && util_rng_unit(&drop->rng) < drop->rate) {
        drop->dropped++;
        return UTIL_OK;
    }
    do {
        sent = sendmsg(fd, &msg, 0);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED)
            return UTIL_OK;
        return util_fail_errno("sendmsg(udp)");
    }
    return UTIL_OK;
}

int xport_write_all(int fd, const void *buf, size_t len, int timeout_ms)
{
    const uint8_t *p = buf;
    uint64_t deadline = util_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            return util_fail_errno("send(tcp, %zu bytes)", len);
        uint64_t now = util_now_ns();
        if (now >= deadline)
            return util_fail(UTIL_ETIMEDOUT, "send(tcp): peer did not read for %d ms", timeout_ms);
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        (void)poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
    }
    return UTIL_OK;
}

void xport_put_mark(uint8_t *p, uint32_t len)
{
    uint32_t v = htonl(XPORT_MARK_LAST | len);
    memcpy(p, &v, 4);
}

uint32_t xport_get_mark(const uint8_t *p, int *last)
{
    uint32_t v;
    memcpy(&v, p, 4);
    v = ntohl(v);
    *last = !!(v & XPORT_MARK_LAST);
    return v & ~XPORT_MARK_LAST;
}
