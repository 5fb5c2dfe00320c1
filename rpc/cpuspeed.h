/* The CPU speed check: how long each CPU takes for one fixed piece of work, slice after slice, all
 * CPUs at once.
 *
 * Why: a VM's CPUs run only while the hypervisor gives them a physical core, at whatever clock the
 * host runs it, and a guest cannot see either (this VM reports no steal time). On a busy host the
 * same loop of 2e8 multiply-adds takes 80-100 ms on either vCPU, then 380-490 ms for seconds at a
 * time, while the testbed's round trips move by 10-25 % from one run to the next. No model of the steps
 * can be judged against round trips like those, and a report that only says "noisy" does not show
 * why; this measures the CPUs themselves between the capture's sweeps (collectors/capture.py
 * cpu_speed_check), so the run summary can say how far their speed moved.
 *
 * The work is a chain of 64-bit multiply-adds, each needing the one before (no memory, no
 * vectorising): its time follows the core's speed and the share of it the CPU got, not caches. */
#ifndef RPCS_CPUSPEED_H
#define RPCS_CPUSPEED_H

#include <stdint.h>
#include <stdio.h>

#define CPUSPEED_MAX_CPUS 64
#define CPUSPEED_MAX_SLICES 100000

struct cpuspeed_config {
    int cpus[CPUSPEED_MAX_CPUS];
    int ncpus;
    uint32_t slices;           /* per CPU */
    uint64_t slice_iterations; /* multiply-adds per slice */
    double max_seconds;        /* the whole run's bound: a CPU stops at it with fewer slices */
};

struct cpuspeed_cpu {
    int cpu;
    uint32_t slices;                         /* slices done (fewer than asked where max_seconds ended them) */
    uint64_t *slice_ns;                      /* each slice's time, in the order run */
    uint64_t min_ns, p50_ns, p90_ns, max_ns; /* over slice_ns; 0 where no slice ran */
};

struct cpuspeed_result {
    int ncpus;
    struct cpuspeed_cpu cpu[CPUSPEED_MAX_CPUS];
    int bounded;    /* 1: max_seconds ended a CPU's slices early */
    double seconds; /* the run's wall time */
};

/* A short check on the calling thread's own CPU (rpc-client --pace-slices: before its calls and after
 * them, so that every run of a capture carries the pace its CPU ran at). */
#define CPUSPEED_PACE_MAX_SLICES 64
struct cpuspeed_pace {
    uint32_t slices; /* 0: not measured */
    uint64_t min_ns, p50_ns;
};

void cpuspeed_config_defaults(struct cpuspeed_config *cfg);
/* Checks the configuration (CPUs, counts, bound); UTIL_EINVAL with a message if it is unusable. */
int cpuspeed_check(const struct cpuspeed_config *cfg);
/* Runs one thread per CPU, pinned, all started together; fills out (cpuspeed_free releases it). */
int cpuspeed_run(const struct cpuspeed_config *cfg, struct cpuspeed_result *out);
void cpuspeed_print(const struct cpuspeed_config *cfg, const struct cpuspeed_result *r, FILE *f, int json);
void cpuspeed_free(struct cpuspeed_result *r);
/* slices (1 to CPUSPEED_PACE_MAX_SLICES) of slice_iterations multiply-adds on the calling thread. */
int cpuspeed_pace(uint64_t slice_iterations, uint32_t slices, struct cpuspeed_pace *out);
/* {"slices", "min_ns", "p50_ns"} as JSON. */
void cpuspeed_pace_json(FILE *f, const struct cpuspeed_pace *p);

#endif
