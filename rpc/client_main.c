/* rpc-client: the benchmark front end of the reference RPC. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "procs.h"
#include "stubcall.h" /* the stub study plugs its procedures in */
#include "turns.h"
#include "util.h"
#include "wire.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: rpc-client [options]\n"
            "Call a procedure of rpc-server repeatedly and report round-trip times.\n\n"
            "  --server ADDR       server IPv4 address (default 127.0.0.1)\n"
            "  --port N            server port (default 7100)\n"
            "  --transport T       udp or tcp (default udp)\n"
            "  --proc P            null incr maxarg maxresult add sum concat echo courier courier_oneway fixedarg\n"
            "  --size N            payload: bytes (maxarg, maxresult, echo, concat, courier*, fixedarg), ints (sum)\n"
            "  --calls N           measured calls per thread (default 1000)\n"
            "  --warmup N          warm-up calls per thread, not measured (default 100)\n"
            "  --threads N         client threads, each with its own binding (default 1)\n"
            "  --cpu LIST          pin client threads to CPUs, round robin (e.g. 0 or 0,1)\n"
            "  --wait MODE         select: sleep in epoll_wait, then recvfrom (DCE's steps; default)\n"
            "                      recv: sleep in a blocking recvfrom (no select steps C11, C17)\n"
            "                      busy: spin on a zero-timeout epoll_wait\n"
            "  --wire ORDER        network (big-endian) or native byte order with a tag (default network)\n"
            "  --max-pdu N         UDP PDU limit in bytes, header included (default 4096)\n"
            "  --max-msg N         largest request or reply body (default 262144)\n"
            "  --rexmit-ms N       wait before asking the server what it has (default 50)\n"
            "  --deadline-ms N     give a call up after this long (default 10000)\n"
            "  --max-seconds S     stop measuring after S seconds (default 300)\n"
            "  --hist-bin-ns N     --json: histogram of the measured RTTs in bins of N ns\n"
            "                      (default 100; 0: none)\n"
            "  --pace-slices N     time N slices of a fixed loop (rpc-cpuspeed's) on the first thread's\n"
            "                      CPU before the warm-up and after the calls: the pace it ran at\n"
            "                      (0 to 64; default 0: none)\n"
            "  --stub VARIANT      stubs for the stub study's procedures (chung.one_int, chung.int_array,\n"
            "                      chung.structure, calib.*): inline-byte inline-item proc-byte proc-item\n"
            "                      block, or interp- before any (default inline-item)\n"
            "  --turn-fds IN,OUT   call only in the turns a coordinator gives: a byte read from IN starts\n"
            "                      one, a byte written to OUT ends it, between two calls; one thread only\n"
            "                      (collectors/interleave.py take_cooperative_turns)\n"
            "  --turn-calls N      a turn is N calls (default 0: --turn-us)\n"
            "  --turn-us N         a turn lasts N us, where --turn-calls is 0 (default 5000)\n"
            "  --no-nb-select      skip DCE's zero-timeout select before the blocking wait (C11)\n"
            "  --no-check          do not verify results\n"
            "  --json              print one JSON object instead of a table\n"
            "  --drop-rate P       TEST ONLY: drop this fraction of datagrams sent (0..0.5)\n"
            "  --drop-seed N       TEST ONLY: seed for --drop-rate\n\n"
            "example: rpc-client --proc echo --size 4000 --calls 10000 --cpu 0 --json\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "server", 1, 0, 's' },
        { "port", 1, 0, 'p' },
        { "transport", 1, 0, 't' },
        { "proc", 1, 0, 'P' },
        { "size", 1, 0, 'n' },
        { "calls", 1, 0, 'c' },
        { "warmup", 1, 0, 'w' },
        { "threads", 1, 0, 'T' },
        { "cpu", 1, 0, 'C' },
        { "wait", 1, 0, 'W' },
        { "wire", 1, 0, 'o' },
        { "max-pdu", 1, 0, 'm' },
        { "max-msg", 1, 0, 'M' },
        { "rexmit-ms", 1, 0, 'r' },
        { "deadline-ms", 1, 0, 'd' },
        { "max-seconds", 1, 0, 'S' },
        { "hist-bin-ns", 1, 0, 'H' },
        { "pace-slices", 1, 0, 'A' },
        { "no-check", 0, 0, 'k' },
        { "no-nb-select", 0, 0, 'N' },
        { "stub", 1, 0, 'V' },
        { "json", 0, 0, 'j' },
        { "turn-fds", 1, 0, 'F' },
        { "turn-us", 1, 0, 'U' },
        { "turn-calls", 1, 0, 'L' },
        { "drop-rate", 1, 0, 'D' },
        { "drop-seed", 1, 0, 'E' },
        { "help", 0, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    struct bench_config cfg;
    struct bench_result res;
    int json = 0, opt, rc = UTIL_OK, longindex = -1;
    uint64_t v;

    if (procs_register(&stubcall_procs)) {
        fprintf(stderr, "rpc-client: %s\n", util_error());
        return 1;
    }
    memset(&cfg, 0, sizeof cfg);
    client_config_defaults(&cfg.client);
    cfg.proc = PROC_NULL;
    cfg.calls = 1000;
    cfg.warmup = 100;
    cfg.threads = 1;
    cfg.check = 1;
    cfg.max_seconds = 300;
    cfg.hist_bin_ns = BENCH_HIST_BIN_NS;
    cfg.turn_in_fd = cfg.turn_out_fd = -1;
    cfg.turn_ns = 5000000;

    while ((opt = getopt_long(argc, argv, "h", opts, &longindex)) != -1) {
        switch (opt) {
        case 's': {
            struct sockaddr_in sa;
            cfg.client.server = optarg;
            rc = xport_resolve(optarg, 0, &sa);
            break;
        }
        case 'p':
            rc = util_parse_u64(optarg, 1, 65535, &v);
            cfg.client.port = (uint16_t)v;
            break;
        case 't': rc = xport_parse_kind(optarg, &cfg.client.transport); break;
        case 'P':
            cfg.proc = proc_by_name(optarg);
            if (cfg.proc < 0)
                rc = util_fail(UTIL_EINVAL, "unknown procedure '%s' (see --help)", optarg);
            break;
        case 'n':
            rc = util_parse_u64(optarg, 0, 1u << 30, &v);
            cfg.size = (uint32_t)v;
            break;
        case 'c': rc = util_parse_u64(optarg, 1, BENCH_MAX_CALLS, &cfg.calls); break;
        case 'w': rc = util_parse_u64(optarg, 0, BENCH_MAX_CALLS, &cfg.warmup); break;
        case 'T':
            rc = util_parse_u64(optarg, 1, BENCH_MAX_THREADS, &v);
            cfg.threads = (int)v;
            break;
        case 'C':
            rc = util_parse_cpu_list(optarg, cfg.cpus, BENCH_MAX_THREADS);
            if (rc > 0) {
                cfg.ncpus = rc;
                rc = UTIL_OK;
            }
            break;
        case 'W': rc = client_parse_wait(optarg, &cfg.client.wait); break;
        case 'o':
            if (!strcmp(optarg, "native"))
                cfg.client.drep = wire_native_drep();
            else if (strcmp(optarg, "network"))
                rc = util_fail(UTIL_EINVAL, "--wire must be network or native");
            break;
        case 'm':
            rc = util_parse_u64(optarg, WIRE_MIN_MAX_PDU, WIRE_MAX_MAX_PDU, &v);
            cfg.client.max_pdu = (uint32_t)v;
            break;
        case 'M':
            rc = util_parse_u64(optarg, 64, 64u << 20, &v);
            cfg.client.max_msg = (uint32_t)v;
            break;
        case 'r':
            rc = util_parse_u64(optarg, 1, 60000, &v);
            cfg.client.rexmit_ms = (uint32_t)v;
            break;
        case 'd':
            rc = util_parse_u64(optarg, 1, 3600000, &v);
            cfg.client.deadline_ms = (uint32_t)v;
            break;
        case 'S': rc = util_parse_double(optarg, 0.001, 86400, &cfg.max_seconds); break;
        case 'H':
            rc = util_parse_u64(optarg, 0, 1000000, &v);
            cfg.hist_bin_ns = (uint32_t)v;
            break;
        case 'A':
            rc = util_parse_u64(optarg, 0, CPUSPEED_PACE_MAX_SLICES, &v);
            cfg.pace_slices = (uint32_t)v;
            break;
        case 'k': cfg.check = 0; break;
        case 'N': cfg.client.nb_select = 0; break;
        case 'V': rc = proc_parse_variant(optarg, &cfg.client.stub_variant); break;
        case 'j': json = 1; break;
        case 'F': rc = turns_parse_fds(optarg, &cfg.turn_in_fd, &cfg.turn_out_fd); break;
        case 'U':
            rc = util_parse_u64(optarg, TURNS_MIN_US, TURNS_MAX_US, &v);
            cfg.turn_ns = v * 1000;
            break;
        case 'L': rc = util_parse_u64(optarg, 0, TURNS_MAX_CALLS, &cfg.turn_calls); break;
        case 'D': rc = util_parse_double(optarg, 0, 0.5, &cfg.client.drop_rate); break;
        case 'E': rc = util_parse_u64(optarg, 0, UINT64_MAX, &cfg.client.drop_seed); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (rc) {
            fprintf(stderr, "rpc-client: --%s: %s\n", longindex >= 0 ? opts[longindex].name : "?", util_error());
            return 2;
        }
        longindex = -1;
    }
    if (optind < argc) {
        fprintf(stderr, "rpc-client: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (proc_is_plugin(cfg.proc) && procs_plugin()->check_variant(cfg.client.stub_variant, cfg.client.drep)) {
        fprintf(stderr, "rpc-client: %s\n", util_error());
        return 2;
    }
    if (cfg.turn_in_fd >= 0 && cfg.threads != 1) {
        fprintf(stderr, "rpc-client: --turn-fds takes one thread (--threads 1): a turn is one caller's\n");
        return 2;
    }
    if (cfg.size > proc_max_size(cfg.proc, cfg.client.max_msg)) {
        fprintf(stderr, "rpc-client: --size %u is too large for %s with --max-msg %u (at most %u)\n", cfg.size,
                proc_name(cfg.proc), cfg.client.max_msg, proc_max_size(cfg.proc, cfg.client.max_msg));
        return 2;
    }
    rc = bench_run(&cfg, &res);
    if (rc) {
        fprintf(stderr, "rpc-client: %s\n", util_error());
        return 1;
    }
    bench_print(&cfg, &res, stdout, json);
    if (res.calls == 0 || res.errors || res.mismatches) {
        fprintf(stderr, "rpc-client: %llu errors, %llu wrong results%s%s\n", (unsigned long long)res.errors,
                (unsigned long long)res.mismatches, res.first_error[0] ? "; first: " : "", res.first_error);
        return 1;
    }
    return 0;
}
