/* tirpc-server: the ONC RPC peer's server. It serves peer.x's procedures through
 * libtirpc's rpcgen skeleton over UDP and TCP and registers both with the rpcbind
 * of its host (tirpc-serve starts one beside it), on ports the kernel picks. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rpc/rpc.h>

#include "peer.h"
#include "peerbench.h"

void rpcspeer_prog_1(struct svc_req *rqstp, SVCXPRT *transp);

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* ------------------------------------------------------------------ procedures */

bool_t peer_null_1_svc(void *argp, void *result, struct svc_req *rq)
{
    (void)argp, (void)result, (void)rq;
    return TRUE;
}

bool_t peer_add_1_svc(peer_addargs *a, int *result, struct svc_req *rq)
{
    (void)rq;
    *result = (int)((unsigned)a->a + (unsigned)a->b);
    return TRUE;
}

bool_t peer_sum_1_svc(peer_ints *a, quad_t *result, struct svc_req *rq)
{
    (void)rq;
    *result = 0;
    for (u_int i = 0; i < a->peer_ints_len; i++)
        *result += a->peer_ints_val[i];
    return TRUE;
}

bool_t peer_concat_1_svc(peer_concatargs *a, peer_str *result, struct svc_req *rq)
{
    size_t n1 = strlen(a->s1), n2 = strlen(a->s2);
    (void)rq;
    *result = malloc(n1 + n2 + 1);
    if (!*result)
        return FALSE;
    memcpy(*result, a->s1, n1);
    memcpy(*result + n1, a->s2, n2 + 1);
    return TRUE;
}

bool_t peer_echo_1_svc(peer_bytes *a, peer_bytes *result, struct svc_req *rq)
{
    (void)rq;
    /* A copy: the skeleton frees the argument and the result apart. */
    result->peer_bytes_len = a->peer_bytes_len;
    result->peer_bytes_val = malloc(a->peer_bytes_len + 1);
    if (!result->peer_bytes_val)
        return FALSE;
    memcpy(result->peer_bytes_val, a->peer_bytes_val, a->peer_bytes_len);
    return TRUE;
}

bool_t peer_maxarg_1_svc(peer_bytes *a, void *result, struct svc_req *rq)
{
    (void)a, (void)result, (void)rq;
    return TRUE;
}

bool_t peer_maxresult_1_svc(u_int *n, peer_bytes *result, struct svc_req *rq)
{
    (void)rq;
    if (*n > PB_MAX_SIZE)
        return FALSE;
    result->peer_bytes_len = *n;
    result->peer_bytes_val = malloc(*n + 1);
    if (!result->peer_bytes_val)
        return FALSE;
    for (u_int i = 0; i < *n; i++)
        result->peer_bytes_val[i] = (char)pb_pattern_byte(i);
    return TRUE;
}

int rpcspeer_prog_1_freeresult(SVCXPRT *transp, xdrproc_t xdr_result, caddr_t result)
{
    (void)transp;
    xdr_free(xdr_result, result);
    return 1;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tirpc-server [options]\n"
            "Serve the peer procedures (null add sum concat echo maxarg maxresult) through libtirpc,\n"
            "registered with the host's rpcbind (run it through tirpc-serve, which starts one).\n\n"
            "  --transport T      udp, tcp or both (default both)\n"
            "  --cpu N            pin the server to CPU N\n"
            "  --duration S       exit after S seconds (default 600)\n"
            "  --ready-file PATH  write \"PID PORT\" (the UDP port, else TCP) once registered\n");
}

static SVCXPRT *serve_on(const char *netid)
{
    struct netconfig *nc = getnetconfigent(netid);
    SVCXPRT *x;
    if (!nc) {
        fprintf(stderr, "tirpc-server: getnetconfigent(%s) failed: no such entry in /etc/netconfig\n", netid);
        return NULL;
    }
    x = svc_tp_create(rpcspeer_prog_1, RPCSPEER_PROG, RPCSPEER_VERS, nc);
    if (!x)
        fprintf(stderr, "tirpc-server: svc_tp_create(%s) failed: is rpcbind running on this host?\n", netid);
    freenetconfigent(nc);
    return x;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = { { "transport", 1, 0, 'T' },  { "cpu", 1, 0, 'C' },  { "duration", 1, 0, 'd' },
                                          { "ready-file", 1, 0, 'r' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
    const char *transport = "both", *ready = NULL;
    int c, cpu = -1, duration = 600, udp, tcp, port = 0, rc = 1;
    SVCXPRT *xu = NULL, *xt = NULL;
    struct sigaction sa;
    struct pollfd *fds = NULL;
    char *end;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'T': transport = optarg; break;
        case 'C':
            cpu = (int)strtol(optarg, &end, 10);
            if (*end || cpu < 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'd':
            duration = (int)strtol(optarg, &end, 10);
            if (*end || duration <= 0) {
                usage(stderr);
                return 2;
            }
            break;
        case 'r': ready = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    udp = !strcmp(transport, "udp") || !strcmp(transport, "both");
    tcp = !strcmp(transport, "tcp") || !strcmp(transport, "both");
    if (optind < argc || (!udp && !tcp)) {
        usage(stderr);
        return 2;
    }
    if (cpu >= 0 && pb_pin_cpu(cpu)) {
        fprintf(stderr, "tirpc-server: sched_setaffinity(CPU %d): %s\n", cpu, strerror(errno));
        return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGALRM, &sa, NULL);
    alarm((unsigned)duration);

    rpcb_unset(RPCSPEER_PROG, RPCSPEER_VERS, NULL); /* a registration a killed server left */
    if ((udp && !(xu = serve_on("udp"))) || (tcp && !(xt = serve_on("tcp"))))
        goto out;
    port = xu ? xu->xp_port : xt->xp_port;
    if (pb_write_ready(ready, port))
        goto out;
    fds = calloc(FD_SETSIZE, sizeof *fds);
    if (!fds) {
        fprintf(stderr, "tirpc-server: out of memory\n");
        goto out;
    }
    /* svc_run's loop, with a way out: poll the library's descriptors, at most 200 ms at a time. */
    while (!stop) {
        int n = svc_max_pollfd < FD_SETSIZE ? svc_max_pollfd : FD_SETSIZE, got;
        memcpy(fds, svc_pollfd, (size_t)n * sizeof *fds);
        got = poll(fds, (nfds_t)n, 200);
        if (got < 0 && errno != EINTR) {
            fprintf(stderr, "tirpc-server: poll failed: %s\n", strerror(errno));
            goto out;
        }
        if (got > 0)
            svc_getreq_poll(fds, got);
    }
    rc = 0;
out:
    svc_unreg(RPCSPEER_PROG, RPCSPEER_VERS);
    free(fds);
    return rc;
}
