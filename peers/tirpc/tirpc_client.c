/* tirpc-client: the ONC RPC peer's client. One CLIENT per thread, made by
 * clnt_create (which asks the server host's rpcbind for the port), calls through
 * rpcgen's stubs; peerbench checks the results and times the calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rpc/rpc.h>

#include "peer.h"
#include "peerbench.h"

struct conn {
    CLIENT *clnt;
    xdrproc_t last_xdr; /* the previous call's result, freed before the next call */
    union {
        int i;
        quad_t q;
        peer_str s;
        peer_bytes b;
    } res;
};

static void release(struct conn *c)
{
    if (c->last_xdr)
        xdr_free(c->last_xdr, (char *)&c->res);
    c->last_xdr = NULL;
    memset(&c->res, 0, sizeof c->res);
}

static void *peer_connect(const struct pb_config *cfg, char *err, size_t n)
{
    struct conn *c = calloc(1, sizeof *c);
    struct timeval total = { (time_t)cfg->deadline_s,
                             (suseconds_t)((cfg->deadline_s - (time_t)cfg->deadline_s) * 1e6) };
    struct timeval retry = { 0, 500000 };
    if (!c) {
        snprintf(err, n, "out of memory");
        return NULL;
    }
    c->clnt = clnt_create(cfg->server, RPCSPEER_PROG, RPCSPEER_VERS, cfg->transport == PB_UDP ? "udp" : "tcp");
    if (!c->clnt) {
        snprintf(err, n, "clnt_create(%s, %s): %s", cfg->server, cfg->transport == PB_UDP ? "udp" : "tcp",
                 clnt_spcreateerror("rpcbind or server"));
        free(c);
        return NULL;
    }
    clnt_control(c->clnt, CLSET_TIMEOUT, (char *)&total);
    if (cfg->transport == PB_UDP)
        clnt_control(c->clnt, CLSET_RETRY_TIMEOUT, (char *)&retry);
    return c;
}

static int peer_call(void *conn, const struct pb_config *cfg, const struct pb_work *w, struct pb_result *r, char *err,
                     size_t n)
{
    struct conn *c = conn;
    enum clnt_stat st;
    release(c);
    switch (cfg->proc) {
    case PB_NULL: st = peer_null_1(NULL, NULL, c->clnt); break;
    case PB_ADD: {
        peer_addargs a = { w->a, w->b };
        st = peer_add_1(&a, &c->res.i, c->clnt);
        r->i = c->res.i;
        break;
    }
    case PB_SUM: {
        peer_ints a = { w->size, w->ints };
        st = peer_sum_1(&a, &c->res.q, c->clnt);
        r->sum = c->res.q;
        break;
    }
    case PB_CONCAT: {
        peer_concatargs a = { w->s1, w->s2 };
        st = peer_concat_1(&a, &c->res.s, c->clnt);
        c->last_xdr = (xdrproc_t)xdr_peer_str;
        r->data = (const uint8_t *)c->res.s;
        r->len = c->res.s ? (uint32_t)strlen(c->res.s) : 0;
        break;
    }
    case PB_ECHO:
    case PB_MAXARG: {
        peer_bytes a = { w->size, (char *)w->data };
        if (cfg->proc == PB_MAXARG) {
            st = peer_maxarg_1(&a, NULL, c->clnt);
            break;
        }
        st = peer_echo_1(&a, &c->res.b, c->clnt);
        c->last_xdr = (xdrproc_t)xdr_peer_bytes;
        r->data = (const uint8_t *)c->res.b.peer_bytes_val;
        r->len = c->res.b.peer_bytes_len;
        break;
    }
    case PB_MAXRESULT: {
        u_int size = w->size;
        st = peer_maxresult_1(&size, &c->res.b, c->clnt);
        c->last_xdr = (xdrproc_t)xdr_peer_bytes;
        r->data = (const uint8_t *)c->res.b.peer_bytes_val;
        r->len = c->res.b.peer_bytes_len;
        break;
    }
    default: snprintf(err, n, "unknown procedure %d", cfg->proc); return PB_ERROR;
    }
    if (st != RPC_SUCCESS) {
        if (st != RPC_CANTDECODERES)
            c->last_xdr = NULL;
        snprintf(err, n, "%s", clnt_sperrno(st));
        return PB_ERROR;
    }
    return PB_OK;
}

static void peer_close(void *conn)
{
    struct conn *c = conn;
    release(c);
    clnt_destroy(c->clnt);
    free(c);
}

int main(int argc, char **argv)
{
    static const struct pb_ops ops = { peer_connect, peer_call, peer_close };
    return pb_main(argc, argv, "tirpc", "udp,tcp", &ops);
}
