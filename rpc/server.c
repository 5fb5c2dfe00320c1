#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "marshal.h"
#include "procs.h"
#include "reasm.h"
#include "replycache.h"
#include "trace.h"
#include "util.h"
#include "wire.h"
#include "xport.h"

#define STAT_ADD(s, name) __atomic_add_fetch(&(s)->stats.name, 1, __ATOMIC_RELAXED)
#define REPLY_REJECTED 0x80 /* replycache flag: the call was rejected, answer duplicates with a reject */
/* epoll tags for the fixed sockets; a connection is tagged with its pointer. */
enum { TAG_WAKE = 1, TAG_UDP = 2, TAG_TCP = 3 };
#define SERVER_EVENTS 64

struct server_conn {
    int fd;
    uint8_t *buf;
    size_t have, cap;
    int refs, closed;
    pthread_mutex_t wlock;
    struct sockaddr_in peer;
    uint64_t last_byte_ns;   /* the last byte received (or the accept) */
    uint64_t last_record_ns; /* the last complete record (or the accept) */
};

struct server_work {
    struct wire_hdr hdr;
    uint64_t call_id;
    uint8_t *body;
    uint32_t len;
    struct sockaddr_in from;
    struct server_conn *conn; /* NULL for UDP */
};

/* Per-thread buffers for running a call and sending its reply. */
struct server_ctx {
    int32_t *ints;
    uint8_t *bytes, *scratch, *reply, *pkt;
    struct xport_drop drop;
};

struct server {
    struct server_config cfg;
    int udp_fd, tcp_fd, wake_rd, wake_wr, epfd;
    uint64_t boot_time;
    struct server_stats stats;
    struct proc_server procs;
    struct replycache cache;
    struct reasm reasm;
    struct server_ctx listener_ctx;
    /* executor pool */
    pthread_t *threads;
    int nthreads;
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    struct server_work *queue;
    uint32_t qhead, qlen;
    int stopping;
    /* TCP connections, owned by the listener; refs let executors reply safely */
    pthread_mutex_t conn_lock;
    struct server_conn **conns;
    uint32_t nconns;
    uint64_t conn_check_ns; /* how often the listener looks for timed-out connections (0: never) */
    uint64_t secret[2];     /* keys the cookies of reply acknowledgements */
    volatile sig_atomic_t stop_requested, stats_requested;
};

void server_config_defaults(struct server_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->bind = "127.0.0.1";
    cfg->port = XPORT_DEFAULT_PORT;
    cfg->udp = cfg->tcp = 1;
    cfg->executors = 2;
    cfg->nb_select = 1;
    cfg->stub_variant = 1; /* compiled inline item copy */
    cfg->max_pdu = WIRE_DEFAULT_MAX_PDU;
    cfg->max_msg = 256u << 10;
    cfg->reply_cache = 1024;
    cfg->reply_bytes = 8u << 20;
    cfg->reasm_slots = 64;
    cfg->reasm_bytes = 8u << 20;
    cfg->reasm_timeout_ms = 2000;
    cfg->queue = 256;
    cfg->reasm_per_source = 16;
    cfg->reasm_evict_ms = 0;
    cfg->max_conns = 64;
    cfg->conns_per_source = 16;
    cfg->tcp_idle_ms = 60000;
    cfg->tcp_progress_ms = 5000;
    cfg->tcp_evict_ms = 1000;
}

/* ------------------------------------------------------------------ contexts */

static void ctx_free(struct server_ctx *x)
{
    free(x->ints);
    free(x->bytes);
    free(x->scratch);
    free(x->reply);
    free(x->pkt);
    memset(x, 0, sizeof *x);
}

static int ctx_init(struct server *s, struct server_ctx *x, uint64_t seed)
{
    uint32_t m = s->cfg.max_msg;
    memset(x, 0, sizeof *x);
    x->ints = malloc((size_t)m / 4 * sizeof(int32_t) + 4);
    x->bytes = malloc(m);
    x->scratch = malloc((size_t)m + 64);
    x->reply = malloc(m);
    x->pkt = malloc(65536 > m + 128 ? 65536 : (size_t)m + 128);
    x->drop.rate = s->cfg.drop_rate;
    util_rng_seed(&x->drop.rng, s->cfg.drop_seed ^ (seed * 0x9e3779b97f4a7c15ull) ^ 0x5e5e5e5eull);
    if (!x->ints || !x->bytes || !x->scratch || !x->reply || !x->pkt) {
        ctx_free(x);
        return util_fail(UTIL_ENOMEM, "malloc(server buffers for %u-byte messages)", m);
    }
    return UTIL_OK;
}

/* ------------------------------------------------------------------ sending */

static void hdr_reply(const struct server *s, const struct wire_hdr *req, struct wire_hdr *h, uint8_t type)
{
    memset(h, 0, sizeof *h);
    h->version = WIRE_VERSION;
    h->type = type;
    h->drep = req->drep; /* answer in the caller's order: the receiver makes it right */
    memcpy(h->interface_id, req->interface_id, 16);
    memcpy(h->activity, req->activity, 16);
    h->boot_time = s->boot_time;
    h->seq = req->seq;
    h->proc = req->proc;
}

static void send_pdu(struct server *s, struct server_ctx *x, const struct wire_hdr *h, const uint8_t *body,
                     const struct sockaddr_in *to, uint64_t call_id)
{
    uint8_t hb[WIRE_HDR_LEN];
    struct iovec iov[2] = { { hb, WIRE_HDR_LEN }, { (void *)body, h->frag_len } };
    uint64_t before = x->drop.dropped;
    wire_encode_hdr(h, hb);
    RPCS_TRACE(s8_begin, call_id, h->frag_num, h->frag_len);
    if (xport_udp_sendv(s->udp_fd, iov, h->frag_len ? 2 : 1, to, &x->drop))
        STAT_ADD(s, send_errors);
    RPCS_TRACE(s10_end, call_id, h->frag_num, h->frag_len);
    if (x->drop.dropped != before)
        STAT_ADD(s, dropped_by_test_option);
}

/* Send a reply body over UDP as fragments of at most max_pdu. */
static void send_reply_udp(struct server *s, struct server_ctx *x, const struct wire_hdr *req, const uint8_t *body,
                           uint32_t len, const struct sockaddr_in *to, uint64_t call_id)
{
    uint32_t n = wire_frag_count(len, s->cfg.max_pdu), per = wire_frag_body(s->cfg.max_pdu);
    struct wire_hdr h;
    hdr_reply(s, req, &h, WIRE_RESPONSE);
    h.total_len = len;
    for (uint32_t f = 0; f < n; f++) {
        h.frag_num = f;
        h.frag_len = wire_frag_len(f, len, s->cfg.max_pdu);
        h.flags = f + 1 == n ? WIRE_F_LASTFRAG : 0;
        send_pdu(s, x, &h, body + (size_t)f * per, to, call_id);
    }
    STAT_ADD(s, replies_sent);
}

/* A reject: status says why; for WIRE_REJ_BUSY, window says what is full (enum wire_busy). */
static void send_reject(struct server *s, struct server_ctx *x, const struct wire_hdr *req, uint32_t reason,
                        uint32_t detail, const struct sockaddr_in *to, struct server_conn *conn, uint64_t call_id)
{
    struct wire_hdr h;
    hdr_reply(s, req, &h, WIRE_REJECT);
    h.status = reason;
    h.window = detail;
    h.flags = WIRE_F_LASTFRAG;
    STAT_ADD(s, rejects_sent);
    if (!conn) {
        send_pdu(s, x, &h, NULL, to, call_id);
        return;
    }
    uint8_t rec[WIRE_TCP_MARK + WIRE_HDR_LEN];
    xport_put_mark(rec, WIRE_HDR_LEN);
    wire_encode_hdr(&h, rec + WIRE_TCP_MARK);
    pthread_mutex_lock(&conn->wlock);
    if (!conn->closed && xport_write_all(conn->fd, rec, sizeof rec, 5000))
        STAT_ADD(s, send_errors);
    pthread_mutex_unlock(&conn->wlock);
}

/* S15 then S8-S10: acknowledge the fragments received in order so far. */
static void send_ack(struct server *s, struct server_ctx *x, const struct wire_hdr *req, uint32_t contiguous,
                     const struct sockaddr_in *to, uint64_t call_id)
{
    struct wire_hdr h;
    RPCS_TRACE(s15_begin, call_id, req->frag_num, contiguous);
    hdr_reply(s, req, &h, WIRE_ACK);
    h.total_len = req->total_len;
    h.window = contiguous;
    RPCS_TRACE(s15_end, call_id, req->frag_num, contiguous);
    STAT_ADD(s, acks_sent);
    send_pdu(s, x, &h, NULL, to, call_id);
}

/* The cookie a client echoes in its ACK of a reply: a keyed hash of where the
 * reply goes and which call it answers, so that only a source that receives
 * what is sent to it can acknowledge. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t reply_cookie(const struct server *s, const uint8_t activity[16], uint32_t seq,
                             const struct sockaddr_in *to)
{
    uint64_t a, b, h;
    memcpy(&a, activity, 8);
    memcpy(&b, activity + 8, 8);
    h = mix64(s->secret[0] ^ to->sin_addr.s_addr ^ ((uint64_t)to->sin_port << 32));
    h = mix64(h ^ a);
    h = mix64(h ^ b ^ s->secret[1]);
    h = mix64(h ^ seq);
    return (uint32_t)(h ^ (h >> 32));
}

/* The reply is ready but larger than the asker has earned: ask the client
 * what it has (an ACKREQ with the cookie its ACK must echo). */
static void send_reply_ready(struct server *s, struct server_ctx *x, const struct wire_hdr *req, uint32_t len,
                             const struct sockaddr_in *to, uint64_t call_id)
{
    struct wire_hdr h;
    hdr_reply(s, req, &h, WIRE_ACKREQ);
    h.total_len = len;
    h.status = reply_cookie(s, req->activity, req->seq, to);
    send_pdu(s, x, &h, NULL, to, call_id);
}

/* Send reply fragments [first, end) of a reply whose bytes from fragment
 * `first` on are in body; the last one asks for an ACK if more remain. */
static void send_reply_window(struct server *s, struct server_ctx *x, const struct wire_hdr *req, const uint8_t *body,
                              uint32_t len, uint32_t first, uint32_t end, const struct sockaddr_in *to,
                              uint64_t call_id)
{
    uint32_t n = wire_frag_count(len, s->cfg.max_pdu), per = wire_frag_body(s->cfg.max_pdu);
    struct wire_hdr h;
    hdr_reply(s, req, &h, WIRE_RESPONSE);
    h.total_len = len;
    for (uint32_t f = first; f < end; f++) {
        h.frag_num = f;
        h.frag_len = wire_frag_len(f, len, s->cfg.max_pdu);
        h.flags = f + 1 == n ? WIRE_F_LASTFRAG : 0;
        if (f + 1 == end && end < n) {
            h.flags |= WIRE_F_ACKREQ;
            h.status = reply_cookie(s, req->activity, req->seq, to);
        }
        send_pdu(s, x, &h, body + (size_t)(f - first) * per, to, call_id);
    }
    STAT_ADD(s, replies_sent);
}

/* Datagram bytes of a message of len body bytes. */
static uint64_t message_bytes(const struct server *s, uint32_t len)
{
    return (uint64_t)len + (uint64_t)wire_frag_count(len, s->cfg.max_pdu) * WIRE_HDR_LEN;
}

/* ------------------------------------------------------------------ connections */

static void conn_put(struct server *s, struct server_conn *c)
{
    int last;
    pthread_mutex_lock(&s->conn_lock);
    last = --c->refs == 0;
    pthread_mutex_unlock(&s->conn_lock);
    if (!last)
        return;
    close(c->fd);
    pthread_mutex_destroy(&c->wlock);
    free(c->buf);
    free(c);
}

/* Close connection i; the caller has counted why. */
static void conn_close(struct server *s, uint32_t i)
{
    struct server_conn *c = s->conns[i];
    (void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    pthread_mutex_lock(&c->wlock);
    c->closed = 1;
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_unlock(&c->wlock);
    s->conns[i] = s->conns[--s->nconns];
    STAT_ADD(s, tcp_closed);
    conn_put(s, c);
}

/* ------------------------------------------------------------------ running a call */

/* Run one call (the rest of S5, S6, S7), send its reply (S8-S10) and record
 * it for at-most-once (S11). Runs on an executor, or on the listener inline. */
static void run_call(struct server *s, struct server_ctx *x, struct server_work *w)
{
    struct marshal_dec dec;
    struct marshal_enc enc;
    uint64_t id = w->call_id;
    int oneway = proc_is_oneway(w->hdr.proc);
    uint32_t len = 0;
    uint8_t cache_flags = 0;
    int held = 0;

    marshal_dec_init(&dec, w->body, w->len, w->hdr.drep);
    marshal_enc_init(&enc, x->scratch, (size_t)s->cfg.max_msg + 64, w->hdr.drep);
    int rc = proc_serve(&s->procs, w->hdr.proc, id, &dec, &enc, x->ints, s->cfg.max_msg / 4, x->bytes, s->cfg.max_msg);
    STAT_ADD(s, executed);
    if (!rc && enc.total > s->cfg.max_msg)
        rc = util_fail(UTIL_ENOMEM, "reply of %zu bytes exceeds the limit", enc.total);
    if (rc) {
        STAT_ADD(s, bad_args);
        cache_flags = REPLY_REJECTED;
        if (!oneway)
            send_reject(s, x, &w->hdr, WIRE_REJ_BAD_ARGS, 0, &w->from, w->conn, id);
    } else if (oneway) {
        STAT_ADD(s, oneway);
    } else {
        len = (uint32_t)enc.total;
        marshal_gather(&enc, 0, x->reply, len);
        if (!w->conn) {
            /* A reply much larger than its request goes at once only to a source that has acknowledged. */
            if (message_bytes(s, len) <= SERVER_AMPLIFY_MAX * message_bytes(s, w->len) ||
                replycache_validated(&s->cache, w->hdr.activity, &w->from))
                send_reply_udp(s, x, &w->hdr, x->reply, len, &w->from, id);
            else
                held = 1;
        } else {
            struct wire_hdr h;
            uint8_t hb[WIRE_TCP_MARK + WIRE_HDR_LEN];
            hdr_reply(s, &w->hdr, &h, WIRE_RESPONSE);
            h.flags = WIRE_F_LASTFRAG;
            h.total_len = h.frag_len = len;
            xport_put_mark(hb, WIRE_HDR_LEN + len);
            wire_encode_hdr(&h, hb + WIRE_TCP_MARK);
            RPCS_TRACE(s8_begin, id, 0, len);
            pthread_mutex_lock(&w->conn->wlock);
            /* One record in one write: header and body gathered by the kernel. */
            struct iovec iov[2] = { { hb, sizeof hb }, { x->reply, len } };
            struct msghdr msg = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
            ssize_t n = w->conn->closed ? -1 : sendmsg(w->conn->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n >= 0 && (size_t)n < sizeof hb + len) {
                /* Partial write of a large reply: finish it, waiting for room. */
                size_t done = (size_t)n;
                if (done < sizeof hb && xport_write_all(w->conn->fd, hb + done, sizeof hb - done, 5000))
                    n = -1;
                else if (xport_write_all(w->conn->fd, x->reply + (done > sizeof hb ? done - sizeof hb : 0),
                                         len - (done > sizeof hb ? done - sizeof hb : 0), 5000))
                    n = -1;
            }
            pthread_mutex_unlock(&w->conn->wlock);
            RPCS_TRACE(s10_end, id, 0, len);
            if (n < 0)
                STAT_ADD(s, send_errors);
            else
                STAT_ADD(s, replies_sent);
        }
    }
    RPCS_TRACE(s11_begin, id);
    if (!w->conn) {
        int kept = replycache_finish(&s->cache, w->hdr.activity, w->hdr.seq, x->reply, len, cache_flags);
        if (held && kept) { /* kept first, so that the client's ACK finds it */
            STAT_ADD(s, replies_held);
            send_reply_ready(s, x, &w->hdr, len, &w->from, id);
        } else if (held) { /* larger than the reply cache's bound: it cannot wait for the ACK */
            STAT_ADD(s, busy);
            send_reject(s, x, &w->hdr, WIRE_REJ_BUSY, WIRE_BUSY_REPLY_CACHE, &w->from, NULL, id);
        }
    } else {
        conn_put(s, w->conn);
    }
    free(w->body);
    w->body = NULL;
    RPCS_TRACE(s11_end, id);
}

static void *executor_main(void *arg)
{
    struct server *s = arg;
    struct server_ctx x;
    int idx;
    pthread_mutex_lock(&s->qlock);
    idx = s->nthreads++;
    pthread_mutex_unlock(&s->qlock);
    if (s->cfg.ncpus)
        (void)util_pin_cpu(s->cfg.cpus[(idx + 1) % s->cfg.ncpus]);
    if (ctx_init(s, &x, (uint64_t)idx + 1)) {
        fprintf(stderr, "rpc-server: executor %d: %s\n", idx, util_error());
        return NULL;
    }
    for (;;) {
        struct server_work w;
        pthread_mutex_lock(&s->qlock);
        while (!s->qlen && !s->stopping)
            pthread_cond_wait(&s->qcond, &s->qlock);
        if (!s->qlen) {
            pthread_mutex_unlock(&s->qlock);
            break;
        }
        w = s->queue[s->qhead];
        s->qhead = (s->qhead + 1) % s->cfg.queue;
        s->qlen--;
        pthread_mutex_unlock(&s->qlock);
        RPCS_TRACE(s5_handoff, w.call_id, w.hdr.proc, w.len);
        run_call(s, &x, &w);
    }
    ctx_free(&x);
    return NULL;
}

/* S5 begins: hand a complete call to an executor, or run it inline. Takes the body. */
static void dispatch(struct server *s, const struct wire_hdr *h, uint8_t *body, uint32_t len,
                     const struct sockaddr_in *from, struct server_conn *conn)
{
    struct server_work w = {
        .hdr = *h, .call_id = wire_call_id(h->activity, h->seq), .body = body, .len = len, .conn = conn
    };
    if (from)
        w.from = *from;
    RPCS_TRACE(s5_begin, w.call_id, h->proc, len);
    STAT_ADD(s, requests);
    if (conn) {
        pthread_mutex_lock(&s->conn_lock);
        conn->refs++;
        pthread_mutex_unlock(&s->conn_lock);
    }
    if (!s->cfg.executors) {
        if (!conn)
            replycache_begin_from(&s->cache, h->activity, h->seq, h->proc, h->drep, from);
        RPCS_TRACE(s5_handoff, w.call_id, h->proc, len);
        run_call(s, &s->listener_ctx, &w);
        return;
    }
    pthread_mutex_lock(&s->qlock);
    if (s->qlen == s->cfg.queue) {
        pthread_mutex_unlock(&s->qlock);
        STAT_ADD(s, busy);
        send_reject(s, &s->listener_ctx, h, WIRE_REJ_BUSY, WIRE_BUSY_QUEUE, from, conn, w.call_id);
        free(body);
        if (conn)
            conn_put(s, conn);
        return;
    }
    if (!conn)
        replycache_begin_from(&s->cache, h->activity, h->seq, h->proc, h->drep, from);
    s->queue[(s->qhead + s->qlen) % s->cfg.queue] = w;
    s->qlen++;
    pthread_cond_signal(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
}

/* ------------------------------------------------------------------ the listener: UDP */

/* Answer a duplicate request, a ping or an ACK of a call that ran, from the
 * reply cache, to the call's own source only. asked: datagram bytes of what
 * asked; first: the first reply fragment the client lacks; acked: the asker
 * echoed the cookie. A source that has not acknowledged gets the whole reply
 * only if it is at most SERVER_AMPLIFY_MAX times `asked`, else an ACKREQ; one
 * that has gets one window from `first`. */
static void resend_cached(struct server *s, const struct wire_hdr *h, const struct sockaddr_in *from, uint64_t call_id,
                          const struct replycache_view *v, uint32_t asked, uint32_t first, int acked)
{
    struct server_ctx *x = &s->listener_ctx;
    struct replycache_view now;
    uint32_t len = v->reply_len, n = wire_frag_count(len, s->cfg.max_pdu), per = wire_frag_body(s->cfg.max_pdu);
    if (v->flags & REPLY_REJECTED) {
        send_reject(s, x, h, WIRE_REJ_BAD_ARGS, 0, from, NULL, call_id);
        return;
    }
    if ((v->flags & WIRE_F_ONEWAY) || proc_is_oneway(h->proc) || first >= n)
        return;
    if (!acked && !v->validated) {
        if (message_bytes(s, len) > (uint64_t)SERVER_AMPLIFY_MAX * asked) {
            send_reply_ready(s, x, h, len, from, call_id);
            return;
        }
        first = 0; /* small enough: all of it */
    }
    uint32_t end = acked || v->validated ? first + wire_window_frags(WIRE_WINDOW_MAX, s->cfg.max_pdu) : n;
    if (end > n)
        end = n;
    size_t off = (size_t)first * per, want = (end == n ? len : (size_t)end * per) - off;
    if (replycache_get(&s->cache, h->activity, h->seq, from, (uint32_t)off, x->reply, want, &now) != REPLYCACHE_DONE ||
        !now.same_source || now.reply_len != len)
        return; /* gone meanwhile (evicted): the client's next ping finds out */
    if (end - first < n)
        STAT_ADD(s, reply_windows);
    send_reply_window(s, x, h, x->reply, len, first, end, from, call_id);
}

/* What the reply cache knows of a call, without copying its reply. */
static int cache_view(struct server *s, const struct wire_hdr *h, const struct sockaddr_in *from,
                      struct replycache_view *v)
{
    return replycache_get(&s->cache, h->activity, h->seq, from, 0, NULL, 0, v);
}

static int same_src(const struct reasm_slot *slot, const struct sockaddr_in *from)
{
    return slot->src.addr == from->sin_addr.s_addr && slot->src.port == from->sin_port;
}

static void handle_request(struct server *s, const struct wire_hdr *h, const uint8_t *body,
                           const struct sockaddr_in *from, uint64_t id)
{
    struct replycache_view v;
    int rc = wire_check_frag(h, s->cfg.max_pdu, s->cfg.max_msg);
    if (rc == UTIL_ENOMEM) {
        STAT_ADD(s, too_big);
        send_reject(s, &s->listener_ctx, h, WIRE_REJ_TOO_BIG, 0, from, NULL, id);
        return;
    }
    if (rc) {
        STAT_ADD(s, bad_fragment);
        return;
    }
    if (!proc_valid(h->proc)) {
        STAT_ADD(s, unknown_proc);
        send_reject(s, &s->listener_ctx, h, WIRE_REJ_UNKNOWN_PROC, 0, from, NULL, id);
        return;
    }
    switch (cache_view(s, h, from, &v)) {
    case REPLYCACHE_DONE:
        if (!v.same_source) {
            STAT_ADD(s, wrong_source);
            return;
        }
        STAT_ADD(s, answered_from_cache);
        resend_cached(s, h, from, id, &v, WIRE_HDR_LEN + h->frag_len, 0, 0);
        return;
    case REPLYCACHE_RUNNING:
        if (!v.same_source)
            STAT_ADD(s, wrong_source);
        else
            STAT_ADD(s, duplicate_while_running);
        return;
    case REPLYCACHE_OLD: STAT_ADD(s, old_calls); return;
    default: break;
    }
    if (h->total_len <= wire_frag_body(s->cfg.max_pdu)) {
        uint8_t *copy = malloc(h->frag_len ? h->frag_len : 1);
        if (!copy) {
            STAT_ADD(s, busy);
            return;
        }
        memcpy(copy, body, h->frag_len);
        dispatch(s, h, copy, h->frag_len, from, NULL);
        return;
    }
    struct reasm_slot *slot = NULL;
    struct reasm_src src = { .addr = from->sin_addr.s_addr, .port = from->sin_port };
    RPCS_TRACE(s16_begin, id, h->frag_num, h->frag_len);
    rc = reasm_add_from(&s->reasm, h, body, &src, util_now_ns(), &slot);
    RPCS_TRACE(s16_end, id, h->frag_num, h->frag_len);
    if (rc == UTIL_ENOMEM) {
        STAT_ADD(s, reassembly_busy);
        send_reject(s, &s->listener_ctx, h, WIRE_REJ_BUSY, WIRE_BUSY_REASSEMBLY, from, NULL, id);
        return;
    }
    if (rc == UTIL_EINVAL) {
        STAT_ADD(s, wrong_source);
        return;
    }
    if (rc < 0) {
        STAT_ADD(s, reassembly_conflict);
        return;
    }
    if (rc == REASM_DUPLICATE)
        STAT_ADD(s, duplicate_fragments);
    else
        STAT_ADD(s, fragments_stored);
    if (rc == REASM_COMPLETE) {
        struct wire_hdr whole = *h;
        uint32_t total = slot->total;
        whole.flags = slot->flags | WIRE_F_LASTFRAG;
        uint8_t *buf = reasm_take(&s->reasm, slot);
        dispatch(s, &whole, buf, total, from, NULL);
    } else if ((h->flags & WIRE_F_ACKREQ) || (slot->got == 1 && h->frag_num > 0)) {
        /* A window's end asks for an ack; and a call whose first fragment here is not fragment 0 lost its
         * earlier ones (its slot expired or was evicted): say so now rather than after the client's wait. */
        send_ack(s, &s->listener_ctx, h, slot->contiguous, from, id);
    }
}

/* A client that waited too long asks what we have: the reply, "working", or
 * how far its request got. Its window says how many reply fragments it has in
 * order. */
static void handle_ping(struct server *s, const struct wire_hdr *h, const struct sockaddr_in *from, uint64_t id)
{
    struct replycache_view v;
    struct reasm_slot *slot;
    STAT_ADD(s, pings);
    if (h->total_len > s->cfg.max_msg)
        return;
    int state = cache_view(s, h, from, &v);
    if ((state == REPLYCACHE_DONE || state == REPLYCACHE_RUNNING) && !v.same_source) {
        STAT_ADD(s, wrong_source);
        return;
    }
    switch (state) {
    case REPLYCACHE_DONE: resend_cached(s, h, from, id, &v, WIRE_HDR_LEN, h->window, 0); return;
    case REPLYCACHE_RUNNING:
        send_ack(s, &s->listener_ctx, h, wire_frag_count(h->total_len, s->cfg.max_pdu), from, id);
        return;
    case REPLYCACHE_OLD: return;
    default:
        slot = reasm_find(&s->reasm, h->activity, h->seq);
        if (slot && !same_src(slot, from)) {
            STAT_ADD(s, wrong_source);
            return;
        }
        send_ack(s, &s->listener_ctx, h, slot ? slot->contiguous : 0, from, id);
    }
}

/* A client acknowledges reply fragments (window: how many it has in order),
 * echoing the cookie of the PDU that asked. Anything else that calls itself an
 * ACK is counted as an unexpected type. */
static void handle_reply_ack(struct server *s, const struct wire_hdr *h, const struct sockaddr_in *from, uint64_t id)
{
    struct replycache_view v;
    if (h->status != reply_cookie(s, h->activity, h->seq, from) || cache_view(s, h, from, &v) != REPLYCACHE_DONE ||
        !v.same_source || !replycache_validate(&s->cache, h->activity, h->seq, from)) {
        STAT_ADD(s, unexpected_type);
        return;
    }
    STAT_ADD(s, reply_acks);
    v.validated = 1;
    resend_cached(s, h, from, id, &v, WIRE_HDR_LEN, h->window, 1);
}

static uint64_t handle_udp(struct server *s)
{
    struct server_ctx *x = &s->listener_ctx;
    struct sockaddr_in from;
    socklen_t flen = sizeof from;
    struct wire_hdr h;
    uint64_t id;
    ssize_t n;

    if (!s->cfg.wait_recv)
        RPCS_TRACE(s4_begin, 0, 0, 0);
    /* In recv-wait mode this recvfrom is also the wait (S14 to S4), bounded by SO_RCVTIMEO. */
    n = recvfrom(s->udp_fd, x->pkt, 65536, s->cfg.wait_recv ? 0 : MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
    if (n < 0) {
        RPCS_TRACE(s4_end, 0, 0, 0);
        return 0;
    }
    STAT_ADD(s, datagrams);
    if (flen != sizeof from || from.sin_family != AF_INET || wire_decode_hdr(x->pkt, (size_t)n, &h)) {
        RPCS_TRACE(s4_end, 0, 0, (uint32_t)n);
        STAT_ADD(s, malformed);
        return 0;
    }
    id = wire_call_id(h.activity, h.seq);
    RPCS_TRACE(s4_end, id, h.frag_num, (uint32_t)n);
    switch (h.type) {
    case WIRE_REQUEST: handle_request(s, &h, x->pkt + WIRE_HDR_LEN, &from, id); break;
    case WIRE_ACKREQ: handle_ping(s, &h, &from, id); break;
    case WIRE_ACK: handle_reply_ack(s, &h, &from, id); break;
    default: STAT_ADD(s, unexpected_type); break;
    }
    return id;
}

/* ------------------------------------------------------------------ the listener: TCP */

/* The connection that has gone longest without a complete record among those
 * from addr (or all, if addr is NULL), with no call in flight; NULL if none. */
static int idlest_conn(struct server *s, const struct in_addr *addr, uint32_t *held)
{
    int best = -1;
    *held = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (uint32_t i = 0; i < s->nconns; i++) {
        struct server_conn *c = s->conns[i];
        if (addr && c->peer.sin_addr.s_addr != addr->s_addr)
            continue;
        (*held)++;
        if (c->refs == 1 && (best < 0 || c->last_record_ns < s->conns[best]->last_record_ns))
            best = (int)i;
    }
    pthread_mutex_unlock(&s->conn_lock);
    return best;
}

/* Make room for a new connection from peer: 0 if there is (maybe by closing
 * the idlest connection of the bound that is reached), -1 if it is refused. */
static int admit_conn(struct server *s, const struct sockaddr_in *peer, uint64_t now)
{
    uint64_t evict_ns = (uint64_t)s->cfg.tcp_evict_ms * 1000000u;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t held, limit = pass == 0 && s->cfg.conns_per_source ? s->cfg.conns_per_source : s->cfg.max_conns;
        int victim = idlest_conn(s, pass == 0 ? &peer->sin_addr : NULL, &held);
        if (held < limit)
            continue;
        if (victim < 0 || now - s->conns[victim]->last_record_ns < evict_ns) {
            if (pass == 0)
                STAT_ADD(s, tcp_refused_per_source);
            return -1;
        }
        STAT_ADD(s, tcp_evicted);
        conn_close(s, (uint32_t)victim);
    }
    return s->nconns < s->cfg.max_conns ? 0 : -1;
}

static void handle_accept(struct server *s)
{
    for (int i = 0; i < 16; i++) {
        struct sockaddr_in peer;
        socklen_t plen = sizeof peer;
        int one = 1, fd = accept4(s->tcp_fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        uint64_t now = util_now_ns();
        if (plen != sizeof peer || peer.sin_family != AF_INET)
            memset(&peer, 0, sizeof peer);
        struct server_conn *c = s->cfg.max_conns && !admit_conn(s, &peer, now) ? calloc(1, sizeof *c) : NULL;
        if (c)
            c->buf = malloc(c->cap = 65536);
        if (!c || !c->buf) {
            STAT_ADD(s, tcp_refused);
            if (c)
                free(c);
            close(fd);
            continue;
        }
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->refs = 1;
        c->peer = peer;
        c->last_byte_ns = c->last_record_ns = now;
        pthread_mutex_init(&c->wlock, NULL);
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            STAT_ADD(s, tcp_refused);
            pthread_mutex_destroy(&c->wlock);
            free(c->buf);
            free(c);
            close(fd);
            continue;
        }
        s->conns[s->nconns++] = c;
        STAT_ADD(s, tcp_accepted);
    }
}

/* Close connections idle (no byte, no partial record) for tcp_idle_ms, or
 * holding a partial record that got no byte for tcp_progress_ms. A connection
 * with a call in flight is waiting for us, not idle. */
static void expire_conns(struct server *s, uint64_t now)
{
    uint64_t idle = (uint64_t)s->cfg.tcp_idle_ms * 1000000u, progress = (uint64_t)s->cfg.tcp_progress_ms * 1000000u;
    for (uint32_t i = s->nconns; i-- > 0;) {
        struct server_conn *c = s->conns[i];
        int busy;
        pthread_mutex_lock(&s->conn_lock);
        busy = c->refs > 1;
        pthread_mutex_unlock(&s->conn_lock);
        if (busy || now < c->last_byte_ns)
            continue;
        if (c->have && progress && now - c->last_byte_ns >= progress) {
            STAT_ADD(s, tcp_progress_timeouts);
            conn_close(s, i);
        } else if (!c->have && idle && now - c->last_byte_ns >= idle) {
            STAT_ADD(s, tcp_idle_timeouts);
            conn_close(s, i);
        }
    }
}

/* Read what a connection has and dispatch every complete record. Returns 0 to
 * keep the connection, -1 to close it because the peer closed it or failed,
 * -2 to close it for a reason already counted (a bad record, no memory). */
static int handle_conn(struct server *s, struct server_conn *c, uint64_t *last_id)
{
    ssize_t n;
    RPCS_TRACE(s4_begin, 0, 0, (uint32_t)c->have);
    n = recv(c->fd, c->buf + c->have, c->cap - c->have, MSG_DONTWAIT);
    if (n <= 0) {
        RPCS_TRACE(s4_end, 0, 0, 0);
        return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    }
    c->last_byte_ns = util_now_ns();
    c->have += (size_t)n;
    size_t off = 0;
    int first = 1;
    while (c->have - off >= WIRE_TCP_MARK) {
        int last;
        uint32_t rec = xport_get_mark(c->buf + off, &last);
        struct wire_hdr h;
        if (!last || rec < WIRE_HDR_LEN || rec > WIRE_HDR_LEN + s->cfg.max_msg) {
            if (first)
                RPCS_TRACE(s4_end, 0, 0, (uint32_t)n);
            STAT_ADD(s, tcp_bad_record);
            return -2;
        }
        if (WIRE_TCP_MARK + (size_t)rec > c->cap) { /* grow to the announced (bounded) size */
            uint8_t *bigger = realloc(c->buf, WIRE_TCP_MARK + (size_t)rec);
            if (!bigger) {
                STAT_ADD(s, busy);
                STAT_ADD(s, tcp_no_memory);
                return -2;
            }
            c->buf = bigger;
            c->cap = WIRE_TCP_MARK + (size_t)rec;
        }
        if (c->have - off < WIRE_TCP_MARK + (size_t)rec)
            break;
        const uint8_t *pdu = c->buf + off + WIRE_TCP_MARK;
        off += WIRE_TCP_MARK + rec;
        if (wire_decode_hdr(pdu, rec, &h) || h.type != WIRE_REQUEST || h.total_len != h.frag_len || h.frag_num) {
            if (first)
                RPCS_TRACE(s4_end, 0, 0, (uint32_t)n);
            STAT_ADD(s, tcp_bad_record);
            return -2;
        }
        c->last_record_ns = c->last_byte_ns;
        *last_id = wire_call_id(h.activity, h.seq);
        if (first)
            RPCS_TRACE(s4_end, *last_id, 0, (uint32_t)n);
        first = 0;
        if (!proc_valid(h.proc)) {
            STAT_ADD(s, unknown_proc);
            send_reject(s, &s->listener_ctx, &h, WIRE_REJ_UNKNOWN_PROC, 0, NULL, c, *last_id);
            continue;
        }
        uint8_t *body = malloc(h.frag_len ? h.frag_len : 1);
        if (!body) {
            STAT_ADD(s, busy);
            STAT_ADD(s, tcp_no_memory);
            return -2;
        }
        memcpy(body, pdu + WIRE_HDR_LEN, h.frag_len);
        dispatch(s, &h, body, h.frag_len, NULL, c);
    }
    if (first)
        RPCS_TRACE(s4_end, 0, 0, (uint32_t)n);
    memmove(c->buf, c->buf + off, c->have - off);
    c->have -= off;
    return 0;
}

/* ------------------------------------------------------------------ lifecycle */

static int write_ready_file(const struct server *s)
{
    char tmp[4096];
    FILE *f;
    if (!s->cfg.ready_file)
        return UTIL_OK;
    snprintf(tmp, sizeof tmp, "%s.tmp", s->cfg.ready_file);
    f = fopen(tmp, "w");
    if (!f)
        return util_fail_errno("fopen(%s)", tmp);
    fprintf(f, "%d %u\n", (int)getpid(), s->cfg.port);
    fclose(f);
    if (rename(tmp, s->cfg.ready_file) < 0)
        return util_fail_errno("rename(%s)", s->cfg.ready_file);
    return UTIL_OK;
}

int server_create(const struct server_config *cfg, struct server **out)
{
    struct server *s = calloc(1, sizeof *s);
    struct sockaddr_in local;
    int pipefd[2], rc;
    if (!s)
        return util_fail(UTIL_ENOMEM, "calloc(server)");
    s->cfg = *cfg;
    s->udp_fd = s->tcp_fd = s->wake_rd = s->wake_wr = s->epfd = -1;
    pthread_mutex_init(&s->qlock, NULL);
    pthread_cond_init(&s->qcond, NULL);
    pthread_mutex_init(&s->conn_lock, NULL);
    s->boot_time = util_now_ns();
    if (getrandom(s->secret, sizeof s->secret, 0) != (ssize_t)sizeof s->secret) {
        rc = util_fail_errno("getrandom(cookie key)");
        goto out;
    }
    {
        /* Timed-out connections are looked for every quarter of the shorter timeout (10 ms to 1 s). */
        uint32_t a = cfg->tcp_idle_ms, b = cfg->tcp_progress_ms, m = !a ? b : !b ? a : a < b ? a : b;
        uint64_t q = (uint64_t)m * 1000000u / 4;
        s->conn_check_ns = !m ? 0 : q < 10000000u ? 10000000u : q > 1000000000u ? 1000000000u : q;
    }
    s->procs.stub_variant = cfg->stub_variant;
    if (cfg->max_pdu < WIRE_MIN_MAX_PDU || cfg->max_pdu > WIRE_MAX_MAX_PDU) {
        rc = util_fail(UTIL_EINVAL, "max PDU %u is outside [%u, %u]", cfg->max_pdu, WIRE_MIN_MAX_PDU, WIRE_MAX_MAX_PDU);
        goto out;
    }
    if (!cfg->queue || cfg->max_msg < 64) {
        rc = util_fail(UTIL_EINVAL, "queue must be >= 1 and the message limit >= 64 bytes");
        goto out;
    }
    s->queue = calloc(cfg->queue, sizeof *s->queue);
    s->conns = calloc(cfg->max_conns ? cfg->max_conns : 1, sizeof *s->conns);
    if (!s->queue || !s->conns) {
        rc = util_fail(UTIL_ENOMEM, "calloc(server queue)");
        goto out;
    }
    if ((rc = replycache_init(&s->cache, cfg->reply_cache, cfg->reply_bytes)) ||
        (rc = reasm_init(&s->reasm, cfg->reasm_slots, cfg->reasm_bytes, cfg->max_pdu, cfg->reasm_timeout_ms)) ||
        (rc = ctx_init(s, &s->listener_ctx, 0)) || (rc = xport_resolve(cfg->bind, cfg->port, &local)))
        goto out;
    reasm_set_sharing(&s->reasm, cfg->reasm_per_source, cfg->reasm_evict_ms);
    if (pipe2(pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
        rc = util_fail_errno("pipe2(wake pipe)");
        goto out;
    }
    s->wake_rd = pipefd[0];
    s->wake_wr = pipefd[1];
    if (cfg->udp && (rc = xport_udp_socket(&local, NULL, &s->udp_fd)))
        goto out;
    if (cfg->tcp && (rc = xport_tcp_listen(&local, &s->tcp_fd)))
        goto out;
    if (cfg->wait_recv) {
        /* Wake at least every 100 ms to see a stop request, the deadline and reassembly expiry. */
        struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };
        if (cfg->tcp || !cfg->udp) {
            rc = util_fail(UTIL_EINVAL, "--wait recv needs --transport udp: the listener can sleep in one socket only");
            goto out;
        }
        if (setsockopt(s->udp_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
            rc = util_fail_errno("setsockopt(SO_RCVTIMEO)");
            goto out;
        }
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        rc = util_fail_errno("epoll_create1");
        goto out;
    }
    {
        int fds[3] = { s->wake_rd, s->udp_fd, s->tcp_fd }, tags[3] = { TAG_WAKE, TAG_UDP, TAG_TCP };
        for (int i = 0; i < 3; i++) {
            struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)tags[i] };
            if (fds[i] >= 0 && epoll_ctl(s->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
                rc = util_fail_errno("epoll_ctl(add fd %d)", fds[i]);
                goto out;
            }
        }
    }
    *out = s;
    s = NULL;
out:
    if (s)
        server_destroy(s);
    return rc;
}

void server_request_stop(struct server *s)
{
    s->stop_requested = 1;
    if (write(s->wake_wr, "x", 1) < 0) {
        /* The pipe is full: the listener is already being woken. */
    }
}

void server_request_stats(struct server *s)
{
    s->stats_requested = 1;
    if (write(s->wake_wr, "s", 1) < 0) {
    }
}

void server_get_stats(struct server *s, struct server_stats *out)
{
#define SERVER_STAT_COPY(name) out->name = __atomic_load_n(&s->stats.name, __ATOMIC_RELAXED);
    SERVER_STATS(SERVER_STAT_COPY)
#undef SERVER_STAT_COPY
    out->reassembly_expired = s->reasm.stats.expired;
    out->reassembly_full = s->reasm.stats.full;
    out->reassembly_evicted = s->reasm.stats.evicted;
    pthread_mutex_lock(&s->cache.lock);
    out->reply_evictions = s->cache.reply_evictions;
    pthread_mutex_unlock(&s->cache.lock);
    /* The process's context switches since it started, all threads: the voluntary ones are
     * sleeps, so per request they show how often the server waited for a packet. */
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru)) {
        out->voluntary_switches = (uint64_t)ru.ru_nvcsw;
        out->involuntary_switches = (uint64_t)ru.ru_nivcsw;
    }
}

void server_print_stats(const struct server_stats *st, const struct server_config *cfg, FILE *out, int json)
{
    /* Built in memory and written at once, so that a reader never sees half a block. */
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        f = out;
    const char *sep = "";
    if (json)
        fputc('{', f);
#define SERVER_STAT_PRINT(name)                                                 \
    if (json)                                                                   \
        fprintf(f, "%s\"%s\": %llu", sep, #name, (unsigned long long)st->name); \
    else                                                                        \
        fprintf(f, "  %-26s %llu\n", #name, (unsigned long long)st->name);      \
    sep = ", ";
    SERVER_STATS(SERVER_STAT_PRINT)
#undef SERVER_STAT_PRINT
    if (json && cfg)
        fprintf(f,
                ", \"limits\": {\"reasm_slots\": %u, \"reasm_per_source\": %u, \"reasm_evict_ms\": %u, "
                "\"reasm_timeout_ms\": %u, \"max_conns\": %u, \"conns_per_source\": %u, \"tcp_idle_ms\": %u, "
                "\"tcp_progress_ms\": %u, \"tcp_evict_ms\": %u, \"amplify_max\": %u}",
                cfg->reasm_slots, cfg->reasm_per_source, cfg->reasm_evict_ms, cfg->reasm_timeout_ms, cfg->max_conns,
                cfg->conns_per_source, cfg->tcp_idle_ms, cfg->tcp_progress_ms, cfg->tcp_evict_ms, SERVER_AMPLIFY_MAX);
    if (json)
        fputs("}\n", f);
    if (f != out) {
        fclose(f);
        fwrite(text, 1, size, out);
        fflush(out);
        free(text);
    }
}

static int find_conn(struct server *s, const struct server_conn *c)
{
    for (uint32_t i = 0; i < s->nconns; i++)
        if (s->conns[i] == c)
            return (int)i;
    return -1;
}

int server_run(struct server *s)
{
    struct epoll_event evs[SERVER_EVENTS];
    uint64_t deadline = s->cfg.duration > 0 ? util_now_ns() + (uint64_t)(s->cfg.duration * 1e9) : 0;
    uint64_t last_id = 0, last_expire = util_now_ns(), last_conn_check = last_expire;
    int rc = UTIL_OK, started = 0;

    if (s->cfg.ncpus && (rc = util_pin_cpu(s->cfg.cpus[0])))
        goto out;
    for (int i = 0; i < s->cfg.executors; i++) {
        pthread_t t;
        int e = pthread_create(&t, NULL, executor_main, s);
        if (e) {
            errno = e;
            rc = util_fail_errno("pthread_create(executor %d)", i);
            goto out;
        }
        pthread_t *grown = realloc(s->threads, (size_t)(started + 1) * sizeof *grown);
        if (!grown) {
            rc = util_fail(UTIL_ENOMEM, "realloc(threads)");
            pthread_detach(t);
            goto out;
        }
        s->threads = grown;
        s->threads[started++] = t;
    }
    if ((rc = write_ready_file(s)))
        goto out;
    while (!s->stop_requested) {
        uint64_t now = util_now_ns();
        int n = 0, timeout = -1;
        if (s->stats_requested) {
            struct server_stats st;
            s->stats_requested = 0;
            server_get_stats(s, &st);
            fprintf(stderr, "rpc-server statistics:\n");
            server_print_stats(&st, &s->cfg, stderr, 0);
        }
        if (deadline && now >= deadline)
            break;
        if (now - last_expire > 100000000u) {
            reasm_expire(&s->reasm, now);
            last_expire = now;
        }
        if (s->conn_check_ns && s->nconns && now - last_conn_check >= s->conn_check_ns) {
            expire_conns(s, now);
            last_conn_check = now;
        }
        if (s->cfg.wait_recv) {
            RPCS_TRACE(s14_begin, last_id);
            uint64_t id = handle_udp(s);
            if (id)
                last_id = id;
            continue;
        }
        if (s->cfg.nb_select) {
            RPCS_TRACE(s12_begin, last_id);
            n = epoll_wait(s->epfd, evs, SERVER_EVENTS, 0);
            RPCS_TRACE(s12_end, last_id);
        }
        if (n == 0) {
            /* Sleep until a packet, a signal, the end of the run, or (only while
             * partial requests wait) the next reassembly expiry check. */
            if (s->reasm.bytes)
                timeout = 100;
            if (s->conn_check_ns && s->nconns) {
                uint64_t due = last_conn_check + s->conn_check_ns;
                int left = due > now ? (int)((due - now) / 1000000u) + 1 : 1;
                timeout = timeout < 0 || left < timeout ? left : timeout;
            }
            if (deadline) {
                int left = (int)((deadline - now) / 1000000u) + 1;
                timeout = timeout < 0 || left < timeout ? left : timeout;
            }
            RPCS_TRACE(s14_begin, last_id);
            n = epoll_wait(s->epfd, evs, SERVER_EVENTS, timeout);
            RPCS_TRACE(s3_end, 0);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = util_fail_errno("epoll_wait(listener)");
            break;
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_WAKE) {
                char drain[64];
                while (read(s->wake_rd, drain, sizeof drain) > 0) {
                }
            } else if (tag == TAG_UDP) {
                uint64_t id = handle_udp(s);
                if (id)
                    last_id = id;
            } else if (tag == TAG_TCP) {
                handle_accept(s);
            } else {
                struct server_conn *c = evs[i].data.ptr;
                int ci = find_conn(s, c);
                int r = ci < 0 ? 0 : (evs[i].events & (EPOLLERR | EPOLLHUP)) ? -1 : handle_conn(s, c, &last_id);
                if (r == -1)
                    STAT_ADD(s, tcp_peer_closed);
                if (r)
                    conn_close(s, (uint32_t)ci);
            }
        }
    }
out:
    pthread_mutex_lock(&s->qlock);
    s->stopping = 1;
    pthread_cond_broadcast(&s->qcond);
    pthread_mutex_unlock(&s->qlock);
    for (int i = 0; i < started; i++)
        pthread_join(s->threads[i], NULL);
    while (s->nconns) {
        STAT_ADD(s, tcp_closed_at_exit);
        conn_close(s, s->nconns - 1);
    }
    if (s->cfg.ready_file)
        unlink(s->cfg.ready_file);
    return rc;
}

void server_destroy(struct server *s)
{
    if (!s)
        return;
    if (s->udp_fd >= 0)
        close(s->udp_fd);
    if (s->tcp_fd >= 0)
        close(s->tcp_fd);
    if (s->wake_rd >= 0)
        close(s->wake_rd);
    if (s->wake_wr >= 0)
        close(s->wake_wr);
    if (s->epfd >= 0)
        close(s->epfd);
    for (uint32_t i = 0; i < s->qlen; i++)
        free(s->queue[(s->qhead + i) % s->cfg.queue].body);
    replycache_free(&s->cache);
    reasm_free(&s->reasm);
    ctx_free(&s->listener_ctx);
    free(s->queue);
    free(s->conns);
    free(s->threads);
    pthread_mutex_destroy(&s->qlock);
    pthread_cond_destroy(&s->qcond);
    pthread_mutex_destroy(&s->conn_lock);
    free(s);
}
