/* rpc-server: the reference RPC server. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "stubcall.h" /* the stub study plugs its procedures in */
#include "util.h"
#include "wire.h"
#include "xport.h"

static struct server *the_server;

static void on_signal(int sig)
{
    if (!the_server)
        return;
    if (sig == SIGUSR1)
        server_request_stats(the_server);
    else
        server_request_stop(the_server);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rpc-server [options]\n"
            "Serve the reference RPC's procedures over UDP and TCP until SIGINT/SIGTERM\n"
            "or --duration; statistics are printed on exit and on SIGUSR1.\n\n"
            "  --bind ADDR            IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N               UDP and TCP port (default 7100)\n"
            "  --transport T          udp, tcp or both (default both)\n"
            "  --executors N          executor threads; 0 = inline mode on the listener (default 2)\n"
            "  --cpu LIST             pin: listener on the first CPU, executors round robin\n"
            "  --wait MODE            select (epoll_wait, DCE's steps; default) or recv (UDP only:\n"
            "                         sleep in a blocking recvfrom; no select steps S3, S12)\n"
            "  --stub VARIANT         stubs that unmarshal the stub study's procedures (default inline-item;\n"
            "                         inline-byte proc-byte proc-item block, or interp- before any)\n"
            "  --no-nb-select         skip DCE's zero-timeout select before the blocking one (S12)\n"
            "  --max-pdu N            UDP PDU limit, header included (default 4096)\n"
            "  --max-msg N            largest request or reply body (default 262144)\n"
            "  --reply-cache N        at-most-once entries (default 1024)\n"
            "  --reply-cache-bytes N  bytes of cached replies (default 8388608)\n"
            "  --reasm-slots N        requests reassembled at once (default 64)\n"
            "  --reasm-bytes N        bytes held for reassembly (default 8388608)\n"
            "  --reasm-timeout-ms N   drop a partial request idle this long (default 2000)\n"
            "  --reasm-per-source N   reassembly slots one source address holds at most (default 16)\n"
            "  --reasm-evict-ms N     when its source's share is full, a new call takes the slot of that\n"
            "                         source's least recently touched partial request; when the table is\n"
            "                         full, that of the source holding the most; if idle this long, else\n"
            "                         it gets a busy reject (default 0: the newest call wins)\n"
            "  --queue N              calls waiting for an executor (default 256)\n"
            "  --max-conns N          TCP connections (default 64)\n"
            "  --conns-per-source N   TCP connections one source address holds at most (default 16)\n"
            "  --tcp-idle-ms N        close a connection that sends nothing for this long (default 60000;\n"
            "                         0: never)\n"
            "  --tcp-progress-ms N    close a connection whose partial record (or record mark) gets no\n"
            "                         byte for this long (default 5000; 0: never)\n"
            "  --tcp-evict-ms N       a new connection over a bound takes the place of the connection with\n"
            "                         no complete record for longest, if that is this long (default 1000)\n"
            "  --duration S           exit after S seconds (default: run until signalled)\n"
            "  --ready-file PATH      write \"PID PORT\" here once listening\n"
            "  --stats-json PATH      write the statistics as JSON here on exit\n"
            "  --drop-rate P          TEST ONLY: drop this fraction of datagrams sent (0..0.5)\n"
            "  --drop-seed N          TEST ONLY: seed for --drop-rate\n\n"
            "A UDP reply goes only to the address and port its call came from. A reply more than 8\n"
            "times the size of its request waits until the client acknowledges it (echoing a cookie),\n"
            "unless the client's activity has acknowledged one before; one larger than\n"
            "--reply-cache-bytes cannot wait and gets a busy reject. A duplicate request or a ping\n"
            "re-sends at most one window of a cached reply, and only to a source that has acknowledged.\n\n"
            "example: rpc-server --executors 0 --cpu 0 --duration 60\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "bind", 1, 0, 'b' },
        { "port", 1, 0, 'p' },
        { "transport", 1, 0, 't' },
        { "executors", 1, 0, 'e' },
        { "cpu", 1, 0, 'C' },
        { "max-pdu", 1, 0, 'm' },
        { "max-msg", 1, 0, 'M' },
        { "reply-cache", 1, 0, 'r' },
        { "reply-cache-bytes", 1, 0, 'R' },
        { "reasm-slots", 1, 0, 'a' },
        { "reasm-bytes", 1, 0, 'A' },
        { "reasm-timeout-ms", 1, 0, 'o' },
        { "queue", 1, 0, 'q' },
        { "max-conns", 1, 0, 'c' },
        { "duration", 1, 0, 'd' },
        { "ready-file", 1, 0, 'y' },
        { "stats-json", 1, 0, 'J' },
        { "drop-rate", 1, 0, 'D' },
        { "drop-seed", 1, 0, 'E' },
        { "help", 0, 0, 'h' },
        { "no-nb-select", 0, 0, 'N' },
        { "wait", 1, 0, 'w' },
        { "stub", 1, 0, 'V' },
        { "reasm-per-source", 1, 0, 'S' },
        { "reasm-evict-ms", 1, 0, 'v' },
        { "conns-per-source", 1, 0, 'P' },
        { "tcp-idle-ms", 1, 0, 'i' },
        { "tcp-progress-ms", 1, 0, 'g' },
        { "tcp-evict-ms", 1, 0, 'x' },
        { 0, 0, 0, 0 },
    };
    struct server_config cfg;
    struct server_stats st;
    struct sigaction sa;
    int opt, rc = UTIL_OK, longindex = -1;
    uint64_t v;

    if (procs_register(&stubcall_procs)) {
        fprintf(stderr, "rpc-server: %s\n", util_error());
        return 1;
    }
    server_config_defaults(&cfg);
    while ((opt = getopt_long(argc, argv, "h", opts, &longindex)) != -1) {
        switch (opt) {
        case 'b': {
            struct sockaddr_in sa;
            cfg.bind = optarg;
            rc = xport_resolve(optarg, 0, &sa);
            break;
        }
        case 'p':
            rc = util_parse_u64(optarg, 1, 65535, &v);
            cfg.port = (uint16_t)v;
            break;
        case 't':
            if (!strcmp(optarg, "both"))
                cfg.udp = cfg.tcp = 1;
            else if (!strcmp(optarg, "udp")) {
                cfg.udp = 1;
                cfg.tcp = 0;
            } else if (!strcmp(optarg, "tcp")) {
                cfg.udp = 0;
                cfg.tcp = 1;
            } else
                rc = util_fail(UTIL_EINVAL, "--transport must be udp, tcp or both");
            break;
        case 'e':
            rc = util_parse_u64(optarg, 0, 64, &v);
            cfg.executors = (int)v;
            break;
        case 'C':
            rc = util_parse_cpu_list(optarg, cfg.cpus, SERVER_MAX_CPUS);
            if (rc > 0) {
                cfg.ncpus = rc;
                rc = UTIL_OK;
            }
            break;
        case 'm':
            rc = util_parse_u64(optarg, WIRE_MIN_MAX_PDU, WIRE_MAX_MAX_PDU, &v);
            cfg.max_pdu = (uint32_t)v;
            break;
        case 'M':
            rc = util_parse_u64(optarg, 64, 64u << 20, &v);
            cfg.max_msg = (uint32_t)v;
            break;
        case 'r':
            rc = util_parse_u64(optarg, 1, 1u << 24, &v);
            cfg.reply_cache = (uint32_t)v;
            break;
        case 'R':
            rc = util_parse_u64(optarg, 0, 1ull << 34, &v);
            cfg.reply_bytes = v;
            break;
        case 'a':
            rc = util_parse_u64(optarg, 1, 1u << 16, &v);
            cfg.reasm_slots = (uint32_t)v;
            break;
        case 'A':
            rc = util_parse_u64(optarg, 0, 1ull << 34, &v);
            cfg.reasm_bytes = v;
            break;
        case 'o':
            rc = util_parse_u64(optarg, 1, 3600000, &v);
            cfg.reasm_timeout_ms = (uint32_t)v;
            break;
        case 'q':
            rc = util_parse_u64(optarg, 1, 1u << 20, &v);
            cfg.queue = (uint32_t)v;
            break;
        case 'c':
            rc = util_parse_u64(optarg, 0, 4096, &v);
            cfg.max_conns = (uint32_t)v;
            break;
        case 'S':
            rc = util_parse_u64(optarg, 1, 1u << 16, &v);
            cfg.reasm_per_source = (uint32_t)v;
            break;
        case 'v':
            rc = util_parse_u64(optarg, 0, 3600000, &v);
            cfg.reasm_evict_ms = (uint32_t)v;
            break;
        case 'P':
            rc = util_parse_u64(optarg, 1, 4096, &v);
            cfg.conns_per_source = (uint32_t)v;
            break;
        case 'i':
            rc = util_parse_u64(optarg, 0, 86400000, &v);
            cfg.tcp_idle_ms = (uint32_t)v;
            break;
        case 'g':
            rc = util_parse_u64(optarg, 0, 86400000, &v);
            cfg.tcp_progress_ms = (uint32_t)v;
            break;
        case 'x':
            rc = util_parse_u64(optarg, 0, 86400000, &v);
            cfg.tcp_evict_ms = (uint32_t)v;
            break;
        case 'd': rc = util_parse_double(optarg, 0, 86400 * 7, &cfg.duration); break;
        case 'y': cfg.ready_file = optarg; break;
        case 'N': cfg.nb_select = 0; break;
        case 'V': rc = proc_parse_variant(optarg, &cfg.stub_variant); break;
        case 'w':
            if (!strcmp(optarg, "recv"))
                cfg.wait_recv = 1;
            else if (strcmp(optarg, "select") && strcmp(optarg, "block"))
                rc = util_fail(UTIL_EINVAL, "'%s' is not a wait mode (select or recv)", optarg);
            break;
        case 'J': cfg.stats_json = optarg; break;
        case 'D': rc = util_parse_double(optarg, 0, 0.5, &cfg.drop_rate); break;
        case 'E': rc = util_parse_u64(optarg, 0, UINT64_MAX, &cfg.drop_seed); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc) {
            fprintf(stderr, "rpc-server: --%s: %s\n", longindex >= 0 ? opts[longindex].name : "?", util_error());
            return 2;
        }
        longindex = -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rpc-server: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (cfg.wait_recv && (cfg.tcp || !cfg.udp)) {
        fprintf(stderr, "rpc-server: --wait recv needs --transport udp: the listener can sleep in one socket only\n");
        return 2;
    }
    rc = server_create(&cfg, &the_server);
    if (rc) {
        fprintf(stderr, "rpc-server: %s\n", util_error());
        return 1;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    rc = server_run(the_server);
    if (rc)
        fprintf(stderr, "rpc-server: %s\n", util_error());
    server_get_stats(the_server, &st);
    fprintf(stderr, "rpc-server statistics:\n");
    server_print_stats(&st, &cfg, stderr, 0);
    if (cfg.stats_json) {
        FILE *f = fopen(cfg.stats_json, "w");
        if (f) {
            server_print_stats(&st, &cfg, f, 1);
            fclose(f);
        } else {
            perror("rpc-server: fopen(--stats-json)");
            rc = rc ? rc : UTIL_ESYS;
        }
    }
    server_destroy(the_server);
    the_server = NULL;
    return rc ? 1 : 0;
}
