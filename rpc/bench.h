/* The client's benchmark front end: build a workload for a procedure and a
 * size, run warm-up and measured calls on one or more threads (each with its
 * own binding, optionally pinned), check every result, and summarise the
 * round-trip times: the first call apart (DCE's "first RPC"), then min, p50,
 * mean, p90, p99, max and calls per second, and a histogram of every measured call
 * (fixed-width bins from the fastest call up; the slower tail counted apart), which
 * shows what percentiles cannot: how many modes there are and how many calls each holds. */
#ifndef RPCS_BENCH_H
#define RPCS_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "cpuspeed.h"
#include "turns.h"

#define BENCH_MAX_THREADS 64
#define BENCH_MAX_CALLS 10000000ull
/* 2000 bins of the default 100 ns span 200 us from the fastest call, which holds every mode
 * of the DCE sizes on this testbed; what is slower still is counted in hist_above. */
#define BENCH_HIST_BINS 2000
#define BENCH_HIST_BIN_NS 100
/* rpc-cpuspeed's slice: the pace is the same figure as the capture's CPU speed checks. */
#define BENCH_PACE_SLICE_ITERATIONS 500000

struct bench_config {
    struct client_config client;
    int proc;
    uint32_t size;
    uint64_t calls, warmup;
    int threads;
    int cpus[BENCH_MAX_THREADS];
    int ncpus;
    int check;            /* verify every result byte for byte */
    double max_seconds;   /* stop measuring after this long, whatever the count */
    uint32_t hist_bin_ns; /* width of a histogram bin; 0: no histogram */
    /* The first thread's CPU pace (cpuspeed.h) in this many slices before the warm-up and after the
     * measured calls; 0: none. Why: a VM's CPUs change pace from run to run, and a capture's rounds
     * move with them (analysis/cpuspeed.py). */
    uint32_t pace_slices;
    /* Calls only in the turns a coordinator gives (turns.h; one thread): turn_in_fd < 0 for none. */
    int turn_in_fd, turn_out_fd;
    uint64_t turn_calls, turn_ns; /* a turn: turn_calls calls, or with 0 turn_ns long */
};

struct bench_result {
    uint64_t calls, errors, mismatches;
    uint64_t first_call_ns;
    uint64_t min_ns, p50_ns, p90_ns, p99_ns, max_ns;
    /* hist[i]: calls with from + i * bin <= RTT < from + (i + 1) * bin, for i < hist_len
     * (trailing empty bins dropped); hist_above: calls beyond the last bin. */
    uint32_t hist[BENCH_HIST_BINS];
    uint32_t hist_len, hist_bin_ns;
    uint64_t hist_from_ns, hist_above;
    /* wall_s: from the first measured call's start to the last one's end, the threads having met
     * after their warm-up (no warm-up call falls inside); calls_per_s: measured calls / wall_s. */
    double mean_ns, calls_per_s, wall_s;
    uint64_t last_counter; /* incr: the counter after this run's last call */
    struct client_stats client;
    /* Context switches of the client threads over the measured calls (not the warm-up). */
    uint64_t vol_switches, invol_switches;
    int placement[BENCH_MAX_THREADS]; /* CPU each thread ran on at the end */
    int aslr_off;                     /* address-space layout randomization was off for this process (setarch -R) */
    struct cpuspeed_pace pace_before, pace_after; /* slices 0: not measured */
    /* With turns: how many the client had, and how many of its voluntary switches were waits for a
     * turn while it counted them (a sleep that is no part of a call). */
    uint64_t turns, turn_waits;
    char first_error[256];
};

int bench_run(const struct bench_config *cfg, struct bench_result *res);
void bench_print(const struct bench_config *cfg, const struct bench_result *res, FILE *f, int json);

#endif
