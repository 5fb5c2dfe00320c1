#include "wakecal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

/* One offset's run, shared by the sender (the calling thread) and the receiver thread. */
struct wakecal_shared {
    int rx_fd, tx_fd, epfd, cpu;
    struct sockaddr_in to;
    uint32_t iterations;
    uint64_t spin_ns, delay_ns, deadline;
    uint64_t alt_spin_ns, alt_delay_ns; /* paired: the odd iterations' (the race offset's) */
    int busy, paired;
    _Atomic uint64_t mark; /* the receiver heads for its wait (0: taken by the sender) */
    _Atomic uint64_t sent; /* when the sender sent (0: not yet) */
    _Atomic int failed;
    uint64_t *lat;
    long sleeps;
    char error[160];
};

void wakecal_config_defaults(struct wakecal_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->sender_cpu = 0;
    cfg->receiver_cpu = 1;
    cfg->iterations = 1000;
    /* The race window lies ~1.5-2.5 us before the mark on this VM (the receiver's way into epoll_wait
     * and off its CPU); 125 ns steps put several points in it. */
    cfg->offset_first_ns = -4000;
    cfg->offset_last_ns = 1000;
    cfg->offset_step_ns = 125;
    cfg->max_seconds = 30;
}

int wakecal_check(const struct wakecal_config *cfg)
{
    long n;
    if (cfg->sender_cpu < 0 || cfg->receiver_cpu < 0 || cfg->sender_cpu == cfg->receiver_cpu)
        return util_fail(UTIL_EINVAL,
                         "sender CPU %d and receiver CPU %d: give two different CPUs (a wake-up "
                         "within one CPU needs no interrupt)",
                         cfg->sender_cpu, cfg->receiver_cpu);
    if (cfg->offset_step_ns <= 0 || cfg->offset_last_ns < cfg->offset_first_ns)
        return util_fail(UTIL_EINVAL, "offsets %d..%d step %d: the step must be > 0 and the last >= the first",
                         cfg->offset_first_ns, cfg->offset_last_ns, cfg->offset_step_ns);
    n = (cfg->offset_last_ns - cfg->offset_first_ns) / cfg->offset_step_ns + 2; /* + the busy point */
    if (n > WAKECAL_MAX_POINTS)
        return util_fail(UTIL_EINVAL, "%ld points: at most %d (a larger step or a shorter range)", n,
                         WAKECAL_MAX_POINTS);
    if (cfg->iterations < 10 || cfg->iterations > 1000000)
        return util_fail(UTIL_EINVAL, "%u iterations per point: give 10 to 1000000", cfg->iterations);
    if (!(cfg->max_seconds > 0))
        return util_fail(UTIL_EINVAL, "max seconds %g: give > 0", cfg->max_seconds);
    return UTIL_OK;
}

/* RES + CAL on one CPU so far (the interrupts that carry a wake-up to another CPU), or -1. */
static long ipi_count(int cpu)
{
    FILE *f = fopen("/proc/interrupts", "r");
    char line[8192];
    long total = -1;
    if (!f)
        return -1;
    if (!fgets(line, sizeof line, f))
        goto out;
    while (fgets(line, sizeof line, f)) {
        char *p = line, *end;
        while (*p == ' ')
            p++;
        if (strncmp(p, "RES:", 4) && strncmp(p, "CAL:", 4))
            continue;
        p += 4;
        for (int c = 0; c <= cpu; c++) {
            long v = strtol(p, &end, 10);
            if (end == p)
                goto out;
            p = end;
            if (c == cpu)
                total = (total < 0 ? 0 : total) + v;
        }
    }
out:
    fclose(f);
    return total;
}

static long thread_sleeps(void)
{
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return u.ru_nvcsw;
}

static int past(const struct wakecal_shared *sh) { return util_now_ns() > sh->deadline || atomic_load(&sh->failed); }

static void *receiver(void *arg)
{
    struct wakecal_shared *sh = arg;
    struct epoll_event ev;
    char byte[16];
    long before;
    if (util_pin_cpu(sh->cpu)) {
        snprintf(sh->error, sizeof sh->error, "%s", util_error());
        goto fail;
    }
    before = thread_sleeps();
    for (uint32_t i = 0; i < sh->iterations; i++) {
        uint64_t mark = util_now_ns(), back, sent;
        int n = 0;
        uint64_t spin = sh->paired && (i & 1) ? sh->alt_spin_ns : sh->spin_ns;
        atomic_store(&sh->mark, mark);
        while (util_now_ns() < mark + spin) {
        }
        if (sh->busy) {
            while (n == 0 && !past(sh))
                n = epoll_wait(sh->epfd, &ev, 1, 0);
        } else {
            n = epoll_wait(sh->epfd, &ev, 1, 1000);
        }
        back = util_now_ns();
        if (n <= 0) {
            snprintf(sh->error, sizeof sh->error, "iteration %u: no datagram within 1 s (epoll_wait %s)", i,
                     n < 0 ? strerror(errno) : "timed out");
            goto fail;
        }
        (void)recv(sh->rx_fd, byte, sizeof byte, MSG_DONTWAIT);
        while ((sent = atomic_load(&sh->sent)) == 0 && !past(sh)) {
        }
        atomic_store(&sh->sent, 0);
        sh->lat[i] = back > sent ? back - sent : 0;
    }
    sh->sleeps = thread_sleeps() - before;
    return NULL;
fail:
    atomic_store(&sh->failed, 1);
    return NULL;
}

static void set_offset(int offset_ns, uint64_t *spin_ns, uint64_t *delay_ns)
{
    *spin_ns = offset_ns < 0 ? (uint64_t)-offset_ns : 0;
    *delay_ns = offset_ns > 0 ? (uint64_t)offset_ns : 0;
}

/* sh->iterations iterations as sh is set: a receiver thread, the calling thread sending; the latencies
 * in sh->lat in iteration order, *ipis the receiver CPU's interrupts over them (-1 unknown). */
static int run_iterations(struct wakecal_shared *sh, int offset_ns, long *ipis)
{
    pthread_t th;
    int rc = UTIL_OK, started = 0;
    long ipis0, ipis1;
    uint32_t n = sh->iterations;

    atomic_store(&sh->mark, 0);
    atomic_store(&sh->sent, 0);
    ipis0 = ipi_count(sh->cpu);
    if ((errno = pthread_create(&th, NULL, receiver, sh))) {
        rc = util_fail_errno("pthread_create(receiver)");
        goto out;
    }
    started = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t mark;
        while ((mark = atomic_load(&sh->mark)) == 0 && !past(sh)) {
        }
        if (past(sh))
            break;
        uint64_t delay = sh->paired && (i & 1) ? sh->alt_delay_ns : sh->delay_ns;
        atomic_store(&sh->mark, 0);
        while (util_now_ns() < mark + delay) {
        }
        atomic_store(&sh->sent, util_now_ns());
        if (sendto(sh->tx_fd, "w", 1, 0, (const struct sockaddr *)&sh->to, sizeof sh->to) != 1) {
            rc = util_fail_errno("sendto(wake-up datagram)");
            atomic_store(&sh->failed, 1);
            goto out;
        }
    }
out:
    if (started)
        pthread_join(th, NULL);
    ipis1 = ipi_count(sh->cpu);
    *ipis = ipis0 >= 0 && ipis1 >= 0 ? ipis1 - ipis0 : -1;
    if (rc)
        return rc;
    if (atomic_load(&sh->failed))
        return util_fail(UTIL_ETIMEDOUT, "offset %d ns: %s", offset_ns,
                         sh->error[0] ? sh->error : "the run's time bound was reached");
    return UTIL_OK;
}

/* One point: every iteration at offset_ns (busy: a reader that never sleeps). */
static int run_point(struct wakecal_shared *sh, int offset_ns, int busy, struct wakecal_point *pt)
{
    int rc;
    long ipis;
    uint32_t n = sh->iterations, keep;
    double sum = 0;

    sh->busy = busy;
    sh->paired = 0;
    set_offset(offset_ns, &sh->spin_ns, &sh->delay_ns);
    if ((rc = run_iterations(sh, offset_ns, &ipis)))
        return rc;
    util_sort_u64(sh->lat, n);
    keep = n - n / 100;
    for (uint32_t i = 0; i < keep; i++)
        sum += (double)sh->lat[i];
    pt->offset_ns = offset_ns;
    pt->busy = busy;
    pt->iterations = n;
    pt->mean_ns = sum / keep;
    pt->p10_ns = sh->lat[n / 10];
    pt->p50_ns = sh->lat[(n - 1) / 2];
    pt->p90_ns = sh->lat[n * 9 / 10];
    pt->sleeps = (double)sh->sleeps / n;
    pt->ipis = ipis >= 0 ? (double)ipis / n : -1;
    return UTIL_OK;
}

/* The median of the after iterations (even, from 2) whose race iteration before was (raced) or was not
 * slower than threshold, sorted into buf; their number in *count. */
static uint64_t after_p50(const uint64_t *lat, uint32_t n, uint64_t threshold, int raced, uint64_t *buf,
                          uint32_t *count)
{
    uint32_t m = 0;
    for (uint32_t i = 2; i < n; i += 2)
        if ((lat[i - 1] >= threshold) == raced)
            buf[m++] = lat[i];
    *count = m;
    if (!m)
        return 0;
    util_sort_u64(buf, m);
    return buf[(m - 1) / 2];
}

/* One after run: the pairs of race and calm (sh->iterations iterations), tallied into *after. */
static int run_pairs(struct wakecal_shared *sh, const struct wakecal_point *race, const struct wakecal_point *calm,
                     uint64_t *buf, struct wakecal_after *after)
{
    uint32_t n = sh->iterations;
    long ipis;
    int rc;

    memset(after, 0, sizeof *after);
    sh->busy = 0;
    sh->paired = 1;
    set_offset(calm->offset_ns, &sh->spin_ns, &sh->delay_ns);
    set_offset(race->offset_ns, &sh->alt_spin_ns, &sh->alt_delay_ns);
    rc = run_iterations(sh, race->offset_ns, &ipis);
    sh->paired = 0;
    if (rc)
        return rc;
    after->ran = 1;
    after->race_offset_ns = race->offset_ns;
    after->offset_ns = calm->offset_ns;
    after->pairs = n / 2;
    after->plain_p50_ns = calm->p50_ns;
    /* Half way between a wake-up that found the CPU polling and one by interrupt at the race offset. */
    after->threshold_ns = (calm->p50_ns + race->p90_ns) / 2;
    for (uint32_t i = 1; i < n; i += 2)
        after->raced += sh->lat[i] >= after->threshold_ns;
    after->race_ipis = ipis >= 0 ? (double)ipis / (n / 2) : -1;
    after->after_raced_p50_ns = after_p50(sh->lat, n, after->threshold_ns, 1, buf, &after->after_raced);
    after->after_calm_p50_ns = after_p50(sh->lat, n, after->threshold_ns, 0, buf, &after->after_calm);
    return UTIL_OK;
}

/* The wake-up after an interrupt-borne one (wakecal.h): the latest swept point that slept without
 * interrupts as the calm offset; as the race, the swept points whose wake-ups took interrupts at least
 * AFTER_RACED of the time (a server CPU's best offset can race only half its wake-ups), the most first,
 * until one races at least half its pairs, AFTER_TRIES at most (behind a calm iteration a race offset
 * can miss the window it hit in the sweep, racing as few as 28 of 500). The run with
 * the most after iterations behind a raced one is kept; each of them is told by its race iteration's own
 * time, so a race offset that raced some of its pairs serves. Not run (after->ran 0) where the sweep has
 * no such points. */
#define AFTER_TRIES 4
#define AFTER_RACED 0.3
static int run_after(struct wakecal_shared *sh, const struct wakecal_result *r, struct wakecal_after *after)
{
    const struct wakecal_point *calm = NULL, *tried[AFTER_TRIES] = { NULL };
    struct wakecal_after got;
    uint64_t *buf = NULL;
    int rc = UTIL_OK, ntried = 0;

    memset(after, 0, sizeof *after);
    for (size_t i = 0; i < r->npoints; i++) {
        const struct wakecal_point *p = &r->points[i];
        if (!p->busy && p->sleeps >= 0.95 && p->ipis >= 0 && p->ipis < 0.1)
            calm = p;
    }
    if (!calm)
        goto out;
    buf = calloc(sh->iterations, sizeof *buf);
    if (!buf) {
        rc = util_fail(UTIL_ENOMEM, "calloc(%u latencies)", sh->iterations);
        goto out;
    }
    for (int t = 0; t < AFTER_TRIES; t++) {
        const struct wakecal_point *race = NULL;
        for (size_t i = 0; i < r->npoints; i++) {
            const struct wakecal_point *p = &r->points[i];
            int used = 0;
            for (int u = 0; u < t; u++)
                used |= tried[u] == p;
            if (!used && !p->busy && p->sleeps >= 0.95 && p->ipis >= AFTER_RACED && (!race || p->ipis > race->ipis))
                race = p;
        }
        if (!race)
            break;
        tried[ntried++] = race;
        if ((rc = run_pairs(sh, race, calm, buf, &got))) {
            if (after->ran) /* a later try failed: the earlier one's run stands */
                rc = UTIL_OK;
            break;
        }
        if (got.after_raced > after->after_raced || !after->ran)
            *after = got;
        if (got.raced >= got.pairs / 2)
            break;
    }
    after->tries = ntried;
out:
    free(buf);
    return rc;
}

int wakecal_run(const struct wakecal_config *cfg, struct wakecal_result *out)
{
    struct wakecal_shared *sh = NULL;
    struct epoll_event ev = { .events = EPOLLIN };
    socklen_t len = sizeof(struct sockaddr_in);
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = wakecal_check(cfg)))
        return rc;
    sh = calloc(1, sizeof *sh);
    if (!sh)
        return util_fail(UTIL_ENOMEM, "calloc(wake-up calibration)");
    sh->rx_fd = sh->tx_fd = sh->epfd = -1;
    sh->lat = calloc(cfg->iterations, sizeof *sh->lat);
    if (!sh->lat) {
        rc = util_fail(UTIL_ENOMEM, "calloc(%u latencies)", cfg->iterations);
        goto out;
    }
    sh->iterations = cfg->iterations;
    sh->cpu = cfg->receiver_cpu;
    sh->deadline = util_now_ns() + (uint64_t)(cfg->max_seconds * 1e9);
    sh->to.sin_family = AF_INET;
    sh->to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((sh->rx_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0 ||
        (sh->tx_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
        rc = util_fail_errno("socket(AF_INET, SOCK_DGRAM)");
        goto out;
    }
    if (bind(sh->rx_fd, (const struct sockaddr *)&sh->to, sizeof sh->to) < 0 ||
        getsockname(sh->rx_fd, (struct sockaddr *)&sh->to, &len) < 0) {
        rc = util_fail_errno("bind(udp 127.0.0.1:0)");
        goto out;
    }
    if ((sh->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 || epoll_ctl(sh->epfd, EPOLL_CTL_ADD, sh->rx_fd, &ev) < 0) {
        rc = util_fail_errno("epoll_ctl(wake-up socket)");
        goto out;
    }
    if ((rc = util_pin_cpu(cfg->sender_cpu)))
        goto out;
    if ((rc = run_point(sh, 0, 1, &out->points[out->npoints])))
        goto out;
    out->npoints++;
    for (int off = cfg->offset_first_ns; off <= cfg->offset_last_ns; off += cfg->offset_step_ns) {
        if ((rc = run_point(sh, off, 0, &out->points[out->npoints])))
            goto out;
        out->npoints++;
    }
    /* The sweep stands without it: a failed after run is reported beside the points, not instead of them. */
    if (run_after(sh, out, &out->after))
        snprintf(out->after_error, sizeof out->after_error, "%s", util_error());
out:
    if (sh) {
        if (sh->epfd >= 0)
            close(sh->epfd);
        if (sh->rx_fd >= 0)
            close(sh->rx_fd);
        if (sh->tx_fd >= 0)
            close(sh->tx_fd);
        free(sh->lat);
        free(sh);
    }
    return rc;
}

void wakecal_print(const struct wakecal_config *cfg, const struct wakecal_result *r, FILE *f, int json)
{
    if (json) {
        fprintf(f,
                "{\"tool\": \"rpc-wakecal\", \"sender_cpu\": %d, \"receiver_cpu\": %d, \"iterations\": %u, "
                "\"time\": \"send to the receiver's return, ns\", \"points\": [",
                cfg->sender_cpu, cfg->receiver_cpu, cfg->iterations);
        for (size_t i = 0; i < r->npoints; i++) {
            const struct wakecal_point *p = &r->points[i];
            fprintf(f,
                    "%s\n  {\"offset_ns\": %d, \"busy\": %s, \"iterations\": %u, \"mean_ns\": %.1f, \"p10_ns\": %llu, "
                    "\"p50_ns\": %llu, \"p90_ns\": %llu, \"sleeps\": %.3f, \"ipis\": %.3f}",
                    i ? "," : "", p->offset_ns, p->busy ? "true" : "false", p->iterations, p->mean_ns,
                    (unsigned long long)p->p10_ns, (unsigned long long)p->p50_ns, (unsigned long long)p->p90_ns,
                    p->sleeps, p->ipis);
        }
        fprintf(f, "\n], \"after_interrupt\": ");
        if (!r->after.ran) {
            fprintf(f, "null, \"after_interrupt_error\": ");
            util_json_string(f, r->after_error);
            fprintf(f, "}\n");
            return;
        }
        fprintf(f,
                "{\"race_offset_ns\": %d, \"offset_ns\": %d, \"tries\": %d, \"pairs\": %u, \"threshold_ns\": %llu, "
                "\"raced\": %u, \"race_ipis\": %.3f, \"after_raced\": %u, \"after_raced_p50_ns\": %llu, "
                "\"after_calm\": %u, \"after_calm_p50_ns\": %llu, \"plain_p50_ns\": %llu}}\n",
                r->after.race_offset_ns, r->after.offset_ns, r->after.tries, r->after.pairs,
                (unsigned long long)r->after.threshold_ns, r->after.raced, r->after.race_ipis, r->after.after_raced,
                (unsigned long long)r->after.after_raced_p50_ns, r->after.after_calm,
                (unsigned long long)r->after.after_calm_p50_ns, (unsigned long long)r->after.plain_p50_ns);
        return;
    }
    fprintf(f,
            "rpc-wakecal: sender on CPU %d, receiver on CPU %d, %u iterations a point; time from the send "
            "to the receiver's return\n",
            cfg->sender_cpu, cfg->receiver_cpu, cfg->iterations);
    fprintf(f, "%-12s %10s %10s %10s %10s %8s %8s\n", "offset (ns)", "mean (us)", "p10", "p50", "p90", "sleeps",
            "ipis");
    for (size_t i = 0; i < r->npoints; i++) {
        const struct wakecal_point *p = &r->points[i];
        char off[16];
        if (p->busy)
            snprintf(off, sizeof off, "busy");
        else
            snprintf(off, sizeof off, "%d", p->offset_ns);
        fprintf(f, "%-12s %10.2f %10.2f %10.2f %10.2f %8.2f %8.2f\n", off, p->mean_ns / 1e3, (double)p->p10_ns / 1e3,
                (double)p->p50_ns / 1e3, (double)p->p90_ns / 1e3, p->sleeps, p->ipis);
    }
    if (!r->after.ran) {
        fprintf(f, "after an interrupt: %s\n",
                r->after_error[0] ? r->after_error
                                  : "not measured (no offset raced the sleeper, or none slept without one)");
        return;
    }
    fprintf(f,
            "after an interrupt: %u pairs of offsets %d then %d ns (%d race offset(s) tried); %u race "
            "iterations took >= %.2f us (%.2f interrupts a pair)\n",
            r->after.pairs, r->after.race_offset_ns, r->after.offset_ns, r->after.tries, r->after.raced,
            (double)r->after.threshold_ns / 1e3, r->after.race_ipis);
    fprintf(f, "  p50 at %d ns: %.2f us behind those (%u), %.2f us behind the others (%u), %.2f us in the sweep\n",
            r->after.offset_ns, (double)r->after.after_raced_p50_ns / 1e3, r->after.after_raced,
            (double)r->after.after_calm_p50_ns / 1e3, r->after.after_calm, (double)r->after.plain_p50_ns / 1e3);
}
