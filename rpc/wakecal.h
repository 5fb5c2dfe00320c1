/* The wake-up calibration: what it costs a reader blocked in epoll_wait to be woken by a datagram,
 * against a reader that never slept, by where the datagram lands against its going to sleep.
 *
 * Why: an untraced run can sleep where the traced one did not (a fragment that its reader, no longer
 * slowed by probes, now waits for), and a wake-up that lands while the sleeper is still leaving its CPU
 * goes by the scheduler's queued wake-up and an inter-processor interrupt (ttwu_queue_wakelist), which
 * on a nested VM costs ~10 us more than a wake-up that finds the CPU polling idle. Neither
 * cost shows in a traced run that took neither path; this measures both on the capture's own CPUs.
 *
 * Two threads on a loopback UDP socket: the sender on one CPU, the receiver on another. Per iteration
 * the receiver marks the moment it heads for its wait, spins `-offset` ns, and waits in a blocking
 * epoll_wait; the sender, seeing the mark, spins `offset` ns (offset > 0) and sends one byte. The
 * time from the send to the receiver's return, and the receiver's sleeps (voluntary context switches)
 * and the interrupts its CPU got (/proc/interrupts RES + CAL), are kept per offset. A busy receiver
 * (epoll_wait with a zero timeout in a loop) gives the same time for a reader that never sleeps.
 *
 * Then the wake-up after an interrupt: iterations alternate between the offset whose
 * wake-ups raced the sleeper most often and the latest offset whose reader slept without interrupt.
 * On this VM the wake-up that follows an interrupt-borne one costs ~0.9 us more than another, and only
 * that one: in the RPC, the call after a call whose reply came by interrupt is ~2 us slower (TCP 4016's
 * second mode, 93-97 % of the time right after the third). The after iterations are told apart by
 * whether the race iteration before them was slow (took the interrupt) or not; those behind a raced one
 * are set against the sweep's point at their offset (analysis/wakeup.py after_interrupt_us). */
#ifndef RPCS_WAKECAL_H
#define RPCS_WAKECAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define WAKECAL_MAX_POINTS 256

struct wakecal_config {
    int sender_cpu, receiver_cpu;
    uint32_t iterations; /* per offset */
    int offset_first_ns, offset_last_ns, offset_step_ns;
    double max_seconds; /* the whole run's bound */
};

struct wakecal_point {
    int offset_ns; /* the send's offset from the receiver's mark; busy: 0 */
    int busy;      /* 1: the receiver never slept (the busy reference) */
    uint32_t iterations;
    double mean_ns; /* send to the receiver's return, the slowest 1 % left out */
    uint64_t p10_ns, p50_ns, p90_ns;
    double sleeps; /* the receiver's voluntary context switches per iteration */
    double ipis;   /* RES + CAL interrupts on the receiver's CPU per iteration; < 0 unknown */
};

/* The wake-up after an interrupt-borne one (see above). */
struct wakecal_after {
    int ran; /* 0: no offset raced the sleeper, or none slept without interrupt */
    int race_offset_ns, offset_ns;
    uint32_t pairs;                                 /* race iterations, each followed by one at offset_ns */
    int tries;                                      /* race offsets tried (run_after), the kept one's among them */
    uint64_t threshold_ns;                          /* a race iteration this slow or slower took the interrupt */
    uint32_t raced;                                 /* race iterations that did */
    double race_ipis;                               /* RES + CAL on the receiver's CPU per pair; < 0 unknown */
    uint32_t after_raced, after_calm;               /* after iterations behind a raced / a calm race iteration */
    uint64_t after_raced_p50_ns, after_calm_p50_ns; /* 0 where there were none */
    uint64_t plain_p50_ns; /* the sweep's point at offset_ns: every wake-up there after another */
};

struct wakecal_result {
    size_t npoints;
    struct wakecal_point points[WAKECAL_MAX_POINTS];
    struct wakecal_after after;
    char after_error[200]; /* why the after run failed ("" if it did not): the sweep is kept */
};

void wakecal_config_defaults(struct wakecal_config *cfg);
/* Checks the configuration (CPUs, offsets, bounds); UTIL_EINVAL with a message if it is unusable. */
int wakecal_check(const struct wakecal_config *cfg);
int wakecal_run(const struct wakecal_config *cfg, struct wakecal_result *out);
void wakecal_print(const struct wakecal_config *cfg, const struct wakecal_result *r, FILE *f, int json);

#endif
