/* The wake-up calibration: what it costs a reader blocked in epoll_wait to be woken by a datagram,
 * against a reader that never slept, by where the datagram lands against its going to sleep.
 *
 * Why: an untraced run can sleep where the traced one did not (a fragment that its reader, no longer
 * slowed by probes, now waits for), and a wake-up that lands while the sleeper is still leaving its CPU
 * goes by the scheduler's queued wake-up and an inter-processor interrupt (ttwu_queue_wakelist), which
 * on a nested VM costs ~10 us more than a wake-up that finds the CPU polling idle (session 24). Neither
 * cost shows in a traced run that took neither path; this measures both on the capture's own CPUs.
 *
 * Two threads on a loopback UDP socket: the sender on one CPU, the receiver on another. Per iteration
 * the receiver marks the moment it heads for its wait, spins `-offset` ns, and waits in a blocking
 * epoll_wait; the sender, seeing the mark, spins `offset` ns (offset > 0) and sends one byte. The
 * time from the send to the receiver's return, and the receiver's sleeps (voluntary context switches)
 * and the interrupts its CPU got (/proc/interrupts RES + CAL), are kept per offset. A busy receiver
 * (epoll_wait with a zero timeout in a loop) gives the same time for a reader that never sleeps. */
#ifndef RPCS_WAKECAL_H
#define RPCS_WAKECAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define WAKECAL_MAX_POINTS 256

struct wakecal_config {
    int sender_cpu, receiver_cpu;
    uint32_t iterations;       /* per offset */
    int offset_first_ns, offset_last_ns, offset_step_ns;
    double max_seconds;        /* the whole run's bound */
};

struct wakecal_point {
    int offset_ns;             /* the send's offset from the receiver's mark; busy: 0 */
    int busy;                  /* 1: the receiver never slept (the busy reference) */
    uint32_t iterations;
    double mean_ns;            /* send to the receiver's return, the slowest 1 % left out */
    uint64_t p10_ns, p50_ns, p90_ns;
    double sleeps;             /* the receiver's voluntary context switches per iteration */
    double ipis;               /* RES + CAL interrupts on the receiver's CPU per iteration; < 0 unknown */
};

struct wakecal_result {
    size_t npoints;
    struct wakecal_point points[WAKECAL_MAX_POINTS];
};

void wakecal_config_defaults(struct wakecal_config *cfg);
/* Checks the configuration (CPUs, offsets, bounds); UTIL_EINVAL with a message if it is unusable. */
int wakecal_check(const struct wakecal_config *cfg);
int wakecal_run(const struct wakecal_config *cfg, struct wakecal_result *out);
void wakecal_print(const struct wakecal_config *cfg, const struct wakecal_result *r, FILE *f, int json);

#endif
