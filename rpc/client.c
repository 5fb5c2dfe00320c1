#include "client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "trace.h"
#include "wire.h"

/* The reference interface's id, carried in every PDU as DCE carries its interface UUID. */
const uint8_t client_interface_id[16] = { 0x72, 0x70, 0x63, 0x73, 0x63, 0x6f, 0x70, 0x65,
                                          0x2d, 0x72, 0x65, 0x66, 0x2d, 0x76, 0x31, 0x00 };

void client_config_defaults(struct client_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->server = "127.0.0.1";
    cfg->port = XPORT_DEFAULT_PORT;
    cfg->transport = XPORT_UDP;
    cfg->max_pdu = WIRE_DEFAULT_MAX_PDU;
    cfg->max_msg = CLIENT_DEFAULT_MAX_MSG;
    cfg->drep = WIRE_DREP_BIG;
    cfg->nb_select = 1;
    cfg->stub_variant = 1; /* compiled inline item copy */
    cfg->rexmit_ms = 50;
    cfg->deadline_ms = 10000;
}

int client_open(struct client *c, const struct client_config *cfg, uint64_t seed)
{
    int rc;
    uint32_t max_frags;
    memset(c, 0, sizeof *c);
    c->fd = c->epfd = -1;
    c->cfg = *cfg;
    if (cfg->max_pdu < WIRE_MIN_MAX_PDU || cfg->max_pdu > WIRE_MAX_MAX_PDU)
        return util_fail(UTIL_EINVAL, "max PDU %u is outside [%u, %u]", cfg->max_pdu, WIRE_MIN_MAX_PDU,
                         WIRE_MAX_MAX_PDU);
    rc = xport_resolve(cfg->server, cfg->port, &c->peer);
    if (rc)
        return rc;
    if (getrandom(c->activity, sizeof c->activity, 0) != (ssize_t)sizeof c->activity)
        return util_fail_errno("getrandom(activity id)");
    util_rng_seed(&c->drop.rng, cfg->drop_seed ^ (seed * 0x9e3779b97f4a7c15ull));
    c->drop.rate = cfg->drop_rate;
    max_frags = wire_frag_count(cfg->max_msg, cfg->max_pdu);
    c->tx_cap =
        cfg->transport == XPORT_TCP ? WIRE_TCP_MARK + WIRE_HDR_LEN + cfg->max_msg : (size_t)max_frags * cfg->max_pdu;
    c->pkt_cap = cfg->transport == XPORT_TCP ? WIRE_TCP_MARK + WIRE_HDR_LEN + cfg->max_msg : 65536;
    c->rx_cap = cfg->max_msg;
    c->tx = malloc(c->tx_cap);
    c->scratch = malloc(cfg->max_msg + 64);
    c->rx = malloc(c->rx_cap);
    c->pkt = malloc(c->pkt_cap);
    c->rxmap = calloc(max_frags, 1);
    if (!c->tx || !c->scratch || !c->rx || !c->pkt || !c->rxmap) {
        rc = util_fail(UTIL_ENOMEM, "malloc(client buffers for %u-byte messages)", cfg->max_msg);
        goto out;
    }
    rc = cfg->transport == XPORT_TCP ? xport_tcp_connect(&c->peer, &c->fd) : xport_udp_socket(NULL, &c->peer, &c->fd);
    if (rc)
        goto out;
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN };
    if (c->epfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        rc = util_fail_errno("epoll(client socket)");
        goto out;
    }
    if (cfg->wait == CLIENT_WAIT_RECV) {
        /* The blocking recvfrom wakes at least every retransmission period. */
        uint32_t ms = cfg->transport == XPORT_TCP ? cfg->deadline_ms : cfg->rexmit_ms;
        struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
            rc = util_fail_errno("setsockopt(SO_RCVTIMEO)");
    }
out:
    if (rc)
        client_close(c);
    return rc;
}

void client_close(struct client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->epfd >= 0)
        close(c->epfd);
    free(c->tx);
    free(c->scratch);
    free(c->rx);
    free(c->pkt);
    free(c->rxmap);
    c->fd = c->epfd = -1;
    c->tx = c->scratch = c->rx = c->pkt = c->rxmap = NULL;
}

int client_parse_wait(const char *s, int *wait)
{
    if (!strcmp(s, "select") || !strcmp(s, "block"))
        *wait = CLIENT_WAIT_SELECT;
    else if (!strcmp(s, "recv"))
        *wait = CLIENT_WAIT_RECV;
    else if (!strcmp(s, "busy"))
        *wait = CLIENT_WAIT_BUSY;
    else
        return util_fail(UTIL_EINVAL, "'%s' is not a wait mode (select, recv or busy)", s);
    return UTIL_OK;
}

const char *client_wait_name(int wait)
{
    return wait == CLIENT_WAIT_RECV ? "recv" : wait == CLIENT_WAIT_BUSY ? "busy" : "select";
}

uint64_t client_next_call_id(const struct client *c) { return wire_call_id(c->activity, c->seq + 1); }

int client_call_start(struct client *c, uint16_t proc, int oneway, struct marshal_enc **enc)
{
    uint64_t next = client_next_call_id(c);
    RPCS_TRACE(c2_begin, next);
    c->seq++;
    c->call_id = next;
    c->proc = proc;
    c->oneway = oneway;
    c->stats.calls++;
    marshal_enc_init(&c->enc, c->scratch, c->cfg.max_msg + 64, c->cfg.drep);
    *enc = &c->enc;
    RPCS_TRACE(c2_end, next);
    return UTIL_OK;
}

void client_call_end(struct client *c)
{
    RPCS_TRACE(c20_begin, c->call_id);
    /* Buffers are kept for the next call; only the call's state is dropped. */
    c->enc.nseg = 0;
    c->enc.total = 0;
    RPCS_TRACE(c20_end, c->call_id);
}

static void fill_hdr(const struct client *c, struct wire_hdr *h, uint8_t type, uint32_t total)
{
    memset(h, 0, sizeof *h);
    h->version = WIRE_VERSION;
    h->type = type;
    h->drep = c->cfg.drep;
    memcpy(h->interface_id, client_interface_id, 16);
    memcpy(h->activity, c->activity, 16);
    h->seq = c->seq;
    h->proc = c->proc;
    h->total_len = total;
    if (c->oneway)
        h->flags |= WIRE_F_ONEWAY;
}

/* Wait for a packet until `until` (ns). with_select: start with the
 * non-blocking select (C11) as the first wait of a window does. */
static int wait_readable(struct client *c, uint64_t until, int with_select)
{
    struct epoll_event ev;
    int n = 0;
    if (with_select && c->cfg.nb_select) {
        RPCS_TRACE(c11_begin, c->call_id);
        n = epoll_wait(c->epfd, &ev, 1, 0);
        RPCS_TRACE(c11_end, c->call_id);
        if (n > 0)
            return 1;
    }
    RPCS_TRACE(c14_begin, c->call_id);
    for (;;) {
        uint64_t now = util_now_ns();
        if (now >= until) {
            n = 0;
            break;
        }
        n = epoll_wait(c->epfd, &ev, 1, c->cfg.wait == CLIENT_WAIT_BUSY ? 0 : (int)((until - now + 999999) / 1000000));
        if (n > 0 || (n < 0 && errno != EINTR))
            break;
    }
    RPCS_TRACE(c17_end, c->call_id);
    if (n < 0)
        return util_fail_errno("epoll_wait(client socket)");
    return n > 0;
}

static int send_frag(struct client *c, uint32_t f, uint32_t nfrags, int ackreq, int retrans)
{
    uint8_t *pdu = c->tx + (size_t)f * c->cfg.max_pdu;
    uint32_t len = wire_frag_len(f, c->enc.total > 0 ? (uint32_t)c->enc.total : 0, c->cfg.max_pdu);
    int rc;
    (void)nfrags;
    pdu[2] = (uint8_t)((pdu[2] & ~(WIRE_F_ACKREQ | WIRE_F_RETRANS)) | (ackreq ? WIRE_F_ACKREQ : 0) |
                       (retrans ? WIRE_F_RETRANS : 0));
    RPCS_TRACE(c7_begin, c->call_id, f, len);
    rc = xport_udp_send(c->fd, pdu, WIRE_HDR_LEN + len, NULL, &c->drop);
    RPCS_TRACE(c9_end, c->call_id, f, len);
    return rc;
}

/* "What have you got?": last_sent is the last request fragment sent, have the
 * reply fragments received in order (the server re-sends from there). */
static int send_ping(struct client *c, uint32_t total, uint32_t last_sent, uint32_t have)
{
    struct wire_hdr h;
    uint8_t buf[WIRE_HDR_LEN];
    fill_hdr(c, &h, WIRE_ACKREQ, total);
    h.frag_num = last_sent;
    h.window = have;
    wire_encode_hdr(&h, buf);
    c->stats.pings++;
    return xport_udp_send(c->fd, buf, sizeof buf, NULL, &c->drop);
}

/* Acknowledge reply fragments: have received in order, echoing the cookie of
 * the server's PDU that asked (wire.h). */
static int send_reply_ack(struct client *c, uint32_t reply_total, uint32_t have, uint32_t cookie)
{
    struct wire_hdr h;
    uint8_t buf[WIRE_HDR_LEN];
    fill_hdr(c, &h, WIRE_ACK, reply_total);
    h.flags &= (uint8_t)~WIRE_F_ONEWAY;
    h.window = have;
    h.status = cookie;
    wire_encode_hdr(&h, buf);
    return xport_udp_send(c->fd, buf, sizeof buf, NULL, &c->drop);
}

/* A reject's reason as words; for busy, what the server says is full. */
static const char *reject_name(uint32_t reason, uint32_t detail)
{
    switch (reason) {
    case WIRE_REJ_UNKNOWN_PROC: return "unknown procedure";
    case WIRE_REJ_BAD_ARGS: return "bad arguments";
    case WIRE_REJ_TOO_BIG: return "request too big";
    case WIRE_REJ_BUSY:
        return detail == WIRE_BUSY_REASSEMBLY    ? "server busy: reassembly slots full"
               : detail == WIRE_BUSY_QUEUE       ? "server busy: call queue full"
               : detail == WIRE_BUSY_REPLY_CACHE ? "server busy: no room to keep the reply until it is "
                                                   "acknowledged (rpc-server --reply-cache-bytes)"
                                                 : "server busy";
    case WIRE_REJ_OLD_CALL: return "old call";
    default: return "unknown reason";
    }
}

/* Counts a received packet the call cannot use; the first one's reason is kept, so that a call that
 * times out with only bad packets in can say what it got instead of its reply. */
static void bad_packet(struct client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad_packet(struct client *c, const char *fmt, ...)
{
    va_list ap;
    if (!c->stats.bad_packets++) {
        va_start(ap, fmt);
        vsnprintf(c->stats.first_bad, sizeof c->stats.first_bad, fmt, ap);
        va_end(ap);
    }
}

static int invoke_udp(struct client *c, uint32_t total, uint32_t nfrags, struct marshal_dec *result)
{
    uint32_t body = wire_frag_body(c->cfg.max_pdu);
    uint32_t acked = 0, next = 0, wbytes = WIRE_WINDOW_INITIAL, window_no = 0;
    uint32_t rx_nfrags = 0, rx_got = 0, rx_total = 0, rx_contig = 0;
    uint32_t busy = 0, busy_detail = 0; /* busy rejects this call got; the last one's detail */
    int retry = 0;                      /* a busy reject came: send the request again after a wait */
    uint64_t call_deadline = util_now_ns() + (uint64_t)c->cfg.deadline_ms * 1000000u;
    uint64_t rexmit_ns = (uint64_t)c->cfg.rexmit_ms * 1000000u;
    int rc = UTIL_OK;

    for (;;) {
        uint32_t end = acked + wire_window_frags(wbytes, c->cfg.max_pdu);
        if (end > nfrags)
            end = nfrags;
        for (; next < end; next++) {
            rc = send_frag(c, next, nfrags, next + 1 == end && end < nfrags, 0);
            if (rc)
                return rc;
        }
        if (c->oneway && next == nfrags)
            return UTIL_OK;

        RPCS_TRACE(c10_begin, c->call_id);
        uint64_t until = util_now_ns() + rexmit_ns;
        RPCS_TRACE(c10_end, c->call_id);
        int first = 1, resend = 0;
        while (!resend) {
            struct wire_hdr h;
            ssize_t n = -1;
            int ready;
            if (c->cfg.wait == CLIENT_WAIT_RECV) {
                /* C14 to C18 in one blocking recvfrom (see client_wait). */
                RPCS_TRACE(c14_begin, c->call_id);
                n = recv(c->fd, c->pkt, c->pkt_cap, 0);
                ready = n >= 0 || errno == EINTR || errno == ECONNREFUSED;
                if (n < 0 && ready)
                    continue;
                if (n < 0 && errno != EAGAIN)
                    return util_fail_errno("recv(udp reply)");
            } else {
                ready = wait_readable(c, until, first);
            }
            first = 0;
            if (ready < 0)
                return ready;
            if (!ready) {
                uint64_t now = util_now_ns();
                c->stats.timeouts++;
                if (now >= call_deadline && busy)
                    return util_fail(UTIL_EREJECT, "call %u (udp): %s (%u busy rejects within %u ms)", c->seq,
                                     reject_name(WIRE_REJ_BUSY, busy_detail), busy, c->cfg.deadline_ms);
                if (now >= call_deadline && c->stats.bad_packets)
                    return util_fail(UTIL_ETIMEDOUT,
                                     "call %u (udp): no reply within %u ms; %llu bad packets came "
                                     "in, the first: %s",
                                     c->seq, c->cfg.deadline_ms, (unsigned long long)c->stats.bad_packets,
                                     c->stats.first_bad);
                if (now >= call_deadline)
                    return util_fail(UTIL_ETIMEDOUT, "call %u (%s): no reply within %u ms", c->seq, "udp",
                                     c->cfg.deadline_ms);
                if (retry) { /* the server was busy: send the request again from its start */
                    retry = 0;
                    resend = 1;
                    break;
                }
                /* Ask the server what it has; its ACK or reply tells us what to resend. */
                rc = send_ping(c, total, next ? next - 1 : 0, rx_nfrags ? rx_contig : 0);
                if (rc)
                    return rc;
                until = now + rexmit_ns;
                continue;
            }
            if (c->cfg.wait != CLIENT_WAIT_RECV) {
                RPCS_TRACE(c18_begin, c->call_id, 0, 0);
                n = recv(c->fd, c->pkt, c->pkt_cap, MSG_DONTWAIT);
            }
            if (n < 0) {
                RPCS_TRACE(c18_end, c->call_id, 0, 0);
                if (errno == EAGAIN || errno == EINTR || errno == ECONNREFUSED)
                    continue;
                return util_fail_errno("recv(udp reply)");
            }
            if (wire_decode_hdr(c->pkt, (size_t)n, &h) || memcmp(h.activity, c->activity, 16) || h.seq != c->seq) {
                RPCS_TRACE(c18_end, c->call_id, 0, (uint32_t)n);
                if (wire_decode_hdr(c->pkt, (size_t)n, &h))
                    bad_packet(c, "%zd-byte datagram: %s", n, util_error());
                else
                    c->stats.stale_packets++;
                continue;
            }
            RPCS_TRACE(c18_end, c->call_id, h.frag_num, (uint32_t)n);
            switch (h.type) {
            case WIRE_ACK:
                if (h.window > nfrags) {
                    bad_packet(c, "ACK of %u fragments for a request of %u", h.window, nfrags);
                    break;
                }
                c->stats.acks++;
                RPCS_TRACE(c22_begin, c->call_id, window_no, h.window);
                if (h.window > acked) {
                    acked = h.window;
                    if (wbytes < WIRE_WINDOW_MAX)
                        wbytes *= 2;
                }
                if (h.window < next) { /* the server misses fragments from h.window on */
                    c->stats.retransmitted_frags += next - h.window;
                    next = h.window;
                }
                window_no++;
                RPCS_TRACE(c22_end, c->call_id, window_no, wire_window_frags(wbytes, c->cfg.max_pdu));
                if (next < nfrags)
                    resend = 1;
                else
                    until = util_now_ns() + rexmit_ns; /* all there: the server is working */
                break;
            case WIRE_RESPONSE:
                if (wire_check_frag(&h, c->cfg.max_pdu, c->cfg.max_msg)) {
                    bad_packet(c, "reply fragment %u: %s", h.frag_num, util_error());
                    break;
                }
                if (rx_nfrags && h.total_len != rx_total) {
                    bad_packet(c, "reply fragment %u of a %u-byte reply, the others of %u", h.frag_num, h.total_len,
                               rx_total);
                    break;
                }
                if (!rx_nfrags) {
                    rx_total = h.total_len;
                    rx_nfrags = wire_frag_count(rx_total, c->cfg.max_pdu);
                    if (rx_nfrags == 1) { /* the common case: decode in place, no copy */
                        marshal_dec_init(result, c->pkt + WIRE_HDR_LEN, h.frag_len, h.drep);
                        return UTIL_OK;
                    }
                    memset(c->rxmap, 0, rx_nfrags);
                }
                if (!c->rxmap[h.frag_num]) {
                    memcpy(c->rx + (size_t)h.frag_num * body, c->pkt + WIRE_HDR_LEN, h.frag_len);
                    c->rxmap[h.frag_num] = 1;
                    if (++rx_got == rx_nfrags) {
                        marshal_dec_init(result, c->rx, rx_total, h.drep);
                        return UTIL_OK;
                    }
                    while (rx_contig < rx_nfrags && c->rxmap[rx_contig])
                        rx_contig++;
                }
                if ((h.flags & WIRE_F_ACKREQ) && (rc = send_reply_ack(c, rx_total, rx_contig, h.status)))
                    return rc;
                until = util_now_ns() + rexmit_ns;
                break;
            case WIRE_ACKREQ: /* the reply is ready: say what we have (the server's cookie proves we got this) */
                if (h.total_len > c->cfg.max_msg) {
                    bad_packet(c, "ACKREQ for a reply of %u bytes, over the %u-byte limit", h.total_len,
                               c->cfg.max_msg);
                    break;
                }
                if ((rc = send_reply_ack(c, h.total_len, rx_nfrags ? rx_contig : 0, h.status)))
                    return rc;
                until = util_now_ns() + rexmit_ns;
                break;
            case WIRE_REJECT:
                c->stats.rejects++;
                if (h.status == WIRE_REJ_BUSY && h.window != WIRE_BUSY_REPLY_CACHE) {
                    /* No room at the server now: wait a retransmission period, then send it all again. */
                    busy++;
                    busy_detail = h.window;
                    retry = 1;
                    acked = next = 0;
                    wbytes = WIRE_WINDOW_INITIAL;
                    until = util_now_ns() + rexmit_ns;
                    break;
                }
                return util_fail(UTIL_EREJECT, "call %u rejected by the server (reason %u): %s", c->seq, h.status,
                                 reject_name(h.status, h.window));
            default: bad_packet(c, "PDU type %u in reply to a request", h.type); break;
            }
        }
    }
}

static int invoke_tcp(struct client *c, uint32_t total, struct marshal_dec *result)
{
    uint32_t len = WIRE_TCP_MARK + WIRE_HDR_LEN + total;
    uint64_t until = util_now_ns() + (uint64_t)c->cfg.deadline_ms * 1000000u;
    size_t have = 0;
    (void)until;
    struct wire_hdr h;
    int rc, last;

    RPCS_TRACE(c7_begin, c->call_id, 0, total);
    rc = xport_write_all(c->fd, c->tx, len, (int)c->cfg.deadline_ms);
    RPCS_TRACE(c9_end, c->call_id, 0, total);
    if (rc || c->oneway)
        return rc;
    RPCS_TRACE(c10_begin, c->call_id);
    RPCS_TRACE(c10_end, c->call_id);
    int first = 1;
    for (;;) {
        ssize_t n;
        if (c->cfg.wait == CLIENT_WAIT_RECV) {
            RPCS_TRACE(c14_begin, c->call_id);
            n = recv(c->fd, c->pkt + have, c->pkt_cap - have, 0);
            if (n < 0 && errno == EAGAIN)
                return util_fail(UTIL_ETIMEDOUT, "call %u (tcp): no reply within %u ms", c->seq, c->cfg.deadline_ms);
        } else {
            int ready = wait_readable(c, until, first);
            first = 0;
            if (ready < 0)
                return ready;
            if (!ready)
                return util_fail(UTIL_ETIMEDOUT, "call %u (tcp): no reply within %u ms", c->seq, c->cfg.deadline_ms);
            RPCS_TRACE(c18_begin, c->call_id, 0, (uint32_t)have);
            n = recv(c->fd, c->pkt + have, c->pkt_cap - have, MSG_DONTWAIT);
        }
        RPCS_TRACE(c18_end, c->call_id, 0, n > 0 ? (uint32_t)(have + (size_t)n) : (uint32_t)have);
        if (n == 0)
            return util_fail(UTIL_EPROTO, "recv(tcp): the server closed the connection");
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return util_fail_errno("recv(tcp reply)");
        }
        have += (size_t)n;
        if (have < WIRE_TCP_MARK)
            continue;
        uint32_t rec = xport_get_mark(c->pkt, &last);
        if (rec < WIRE_HDR_LEN || rec > c->pkt_cap - WIRE_TCP_MARK || !last)
            return util_fail(UTIL_EPROTO, "recv(tcp): bad record mark (%u bytes)", rec);
        if (have < WIRE_TCP_MARK + rec)
            continue;
        if (have > WIRE_TCP_MARK + rec)
            return util_fail(UTIL_EPROTO, "recv(tcp): %zu unexpected bytes after the reply",
                             have - WIRE_TCP_MARK - rec);
        rc = wire_decode_hdr(c->pkt + WIRE_TCP_MARK, rec, &h);
        if (rc)
            return rc;
        if (h.seq != c->seq)
            return util_fail(UTIL_EPROTO, "recv(tcp): reply for call %u while waiting for %u", h.seq, c->seq);
        if (h.type == WIRE_REJECT) {
            c->stats.rejects++;
            return util_fail(UTIL_EREJECT, "call %u rejected by the server (reason %u): %s", c->seq, h.status,
                             reject_name(h.status, h.window));
        }
        if (h.type != WIRE_RESPONSE || h.total_len != h.frag_len)
            return util_fail(UTIL_EPROTO, "recv(tcp): unexpected %s PDU", wire_type_name(h.type));
        marshal_dec_init(result, c->pkt + WIRE_TCP_MARK + WIRE_HDR_LEN, h.frag_len, h.drep);
        return UTIL_OK;
    }
}

int client_call_invoke(struct client *c, struct marshal_dec *result)
{
    uint32_t total = (uint32_t)c->enc.total, nfrags, body = wire_frag_body(c->cfg.max_pdu);
    struct wire_hdr h;

    if (c->enc.total > c->cfg.max_msg)
        return util_fail(UTIL_ENOMEM, "request of %zu bytes exceeds the %u-byte limit", c->enc.total, c->cfg.max_msg);

    RPCS_TRACE(c4_begin, c->call_id, total);
    nfrags = c->cfg.transport == XPORT_TCP ? 1 : wire_frag_count(total, c->cfg.max_pdu);
    RPCS_TRACE(c4_end, c->call_id, total);

    RPCS_TRACE(c5_begin, c->call_id, total);
    if (c->cfg.transport == XPORT_TCP)
        marshal_gather(&c->enc, 0, c->tx + WIRE_TCP_MARK + WIRE_HDR_LEN, total);
    else
        for (uint32_t f = 0; f < nfrags; f++)
            marshal_gather(&c->enc, (size_t)f * body, c->tx + (size_t)f * c->cfg.max_pdu + WIRE_HDR_LEN,
                           wire_frag_len(f, total, c->cfg.max_pdu));
    RPCS_TRACE(c5_end, c->call_id, total);

    RPCS_TRACE(c6_begin, c->call_id, total);
    fill_hdr(c, &h, WIRE_REQUEST, total);
    if (c->cfg.transport == XPORT_TCP) {
        h.frag_len = total;
        h.flags |= WIRE_F_LASTFRAG;
        xport_put_mark(c->tx, WIRE_HDR_LEN + total);
        wire_encode_hdr(&h, c->tx + WIRE_TCP_MARK);
    } else {
        for (uint32_t f = 0; f < nfrags; f++) {
            h.frag_num = f;
            h.frag_len = wire_frag_len(f, total, c->cfg.max_pdu);
            h.flags = (uint8_t)((c->oneway ? WIRE_F_ONEWAY : 0) | (f + 1 == nfrags ? WIRE_F_LASTFRAG : 0));
            wire_encode_hdr(&h, c->tx + (size_t)f * c->cfg.max_pdu);
        }
    }
    RPCS_TRACE(c6_end, c->call_id, total);

    return c->cfg.transport == XPORT_TCP ? invoke_tcp(c, total, result) : invoke_udp(c, total, nfrags, result);
}
