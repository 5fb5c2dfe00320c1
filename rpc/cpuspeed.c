#include "cpuspeed.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* One CPU's thread. */
struct cpuspeed_worker {
    const struct cpuspeed_config *cfg;
    struct cpuspeed_cpu *out;
    _Atomic int *go; /* 0: wait; 1: run; -1: give up (a thread could not be started) */
    uint64_t deadline_ns;
    int bounded;
    char error[160]; /* why the thread failed ("" if it did not) */
};

void cpuspeed_config_defaults(struct cpuspeed_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->cpus[0] = 0;
    cfg->ncpus = 1;
    cfg->slices = 100;
    /* ~0.7 ms a slice on this VM at full speed: 100 slices a CPU take ~0.07 s, short enough to run
     * between the capture's sweeps, and the hypervisor's multi-millisecond pauses show in single slices. */
    cfg->slice_iterations = 500000;
    cfg->max_seconds = 5;
}

int cpuspeed_check(const struct cpuspeed_config *cfg)
{
    if (cfg->ncpus < 1 || cfg->ncpus > CPUSPEED_MAX_CPUS)
        return util_fail(UTIL_EINVAL, "%d CPUs: give 1 to %d", cfg->ncpus, CPUSPEED_MAX_CPUS);
    for (int i = 0; i < cfg->ncpus; i++) {
        if (cfg->cpus[i] < 0)
            return util_fail(UTIL_EINVAL, "CPU %d: give CPU numbers of 0 or more", cfg->cpus[i]);
        for (int j = 0; j < i; j++)
            if (cfg->cpus[j] == cfg->cpus[i])
                return util_fail(UTIL_EINVAL, "CPU %d is given twice: one thread a CPU", cfg->cpus[i]);
    }
    if (cfg->slices < 1 || cfg->slices > CPUSPEED_MAX_SLICES)
        return util_fail(UTIL_EINVAL, "%u slices: give 1 to %d", cfg->slices, CPUSPEED_MAX_SLICES);
    if (cfg->slice_iterations < 1000 || cfg->slice_iterations > 1000000000ULL)
        return util_fail(UTIL_EINVAL, "%llu iterations a slice: give 1000 to 1000000000",
                         (unsigned long long)cfg->slice_iterations);
    if (!(cfg->max_seconds > 0))
        return util_fail(UTIL_EINVAL, "a bound of %g s: give more than 0", cfg->max_seconds);
    return UTIL_OK;
}

/* n multiply-adds, each on the one before. The empty volatile asm takes x in and out at every step, so
 * the compiler can neither fold the chain nor drop it: no sink is needed for its end. */
static uint64_t cpuspeed_work(uint64_t x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* Up to n slices of iterations multiply-adds into ns[], none begun at or after deadline_ns; the
 * slices done. The check's threads and the pace both time their slices here. */
static uint32_t cpuspeed_time_slices(uint64_t iterations, uint32_t n, uint64_t deadline_ns, uint64_t *ns)
{
    uint64_t x = 1;
    uint32_t done = 0;
    for (; done < n; done++) {
        uint64_t t0 = util_now_ns();
        if (t0 >= deadline_ns)
            break;
        x = cpuspeed_work(x, iterations);
        ns[done] = util_now_ns() - t0;
    }
    return done;
}

static void *cpuspeed_thread(void *arg)
{
    struct cpuspeed_worker *w = arg;
    struct cpuspeed_cpu *c = w->out;
    uint64_t *sorted = NULL;
    int rc = util_pin_cpu(c->cpu);

    if (rc) {
        snprintf(w->error, sizeof w->error, "%s", util_error());
        goto out;
    }
    /* All CPUs start together, once every thread is there. */
    while (atomic_load(w->go) == 0)
        sched_yield();
    if (atomic_load(w->go) < 0)
        goto out;
    c->slices = cpuspeed_time_slices(w->cfg->slice_iterations, w->cfg->slices, w->deadline_ns, c->slice_ns);
    w->bounded = c->slices < w->cfg->slices;
    if (c->slices == 0)
        goto out;
    sorted = malloc(c->slices * sizeof *sorted);
    if (!sorted) {
        snprintf(w->error, sizeof w->error, "malloc(%u slices): out of memory", c->slices);
        goto out;
    }
    memcpy(sorted, c->slice_ns, c->slices * sizeof *sorted);
    util_sort_u64(sorted, c->slices);
    c->min_ns = sorted[0];
    c->p50_ns = sorted[(c->slices - 1) * 50 / 100];
    c->p90_ns = sorted[(c->slices - 1) * 90 / 100];
    c->max_ns = sorted[c->slices - 1];
out:
    free(sorted);
    return NULL;
}

int cpuspeed_run(const struct cpuspeed_config *cfg, struct cpuspeed_result *out)
{
    struct cpuspeed_worker w[CPUSPEED_MAX_CPUS];
    pthread_t th[CPUSPEED_MAX_CPUS];
    _Atomic int go = 0;
    int started = 0, rc = UTIL_OK, err;
    uint64_t t0 = util_now_ns();

    memset(out, 0, sizeof *out);
    memset(w, 0, sizeof w);
    if ((rc = cpuspeed_check(cfg)))
        return rc;
    out->ncpus = cfg->ncpus;
    for (int i = 0; i < cfg->ncpus; i++) {
        out->cpu[i].cpu = cfg->cpus[i];
        out->cpu[i].slice_ns = calloc(cfg->slices, sizeof *out->cpu[i].slice_ns);
        if (!out->cpu[i].slice_ns) {
            rc = util_fail(UTIL_ENOMEM, "calloc(%u slices): out of memory", cfg->slices);
            goto out;
        }
    }
    for (int i = 0; i < cfg->ncpus; i++)
        w[i] = (struct cpuspeed_worker){
            .cfg = cfg, .out = &out->cpu[i], .go = &go, .deadline_ns = t0 + (uint64_t)(cfg->max_seconds * 1e9)
        };
    for (; started < cfg->ncpus; started++) {
        if ((err = pthread_create(&th[started], NULL, cpuspeed_thread, &w[started]))) {
            errno = err;
            rc = util_fail_errno("pthread_create(CPU %d)", cfg->cpus[started]);
            goto out;
        }
    }
out:
    atomic_store(&go, rc ? -1 : 1);
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        if (w[i].error[0] && rc == UTIL_OK)
            rc = util_fail(UTIL_ESYS, "CPU %d: %s", out->cpu[i].cpu, w[i].error);
        out->bounded |= w[i].bounded;
    }
    out->seconds = (double)(util_now_ns() - t0) / 1e9;
    if (rc)
        cpuspeed_free(out);
    return rc;
}

void cpuspeed_print(const struct cpuspeed_config *cfg, const struct cpuspeed_result *r, FILE *f, int json)
{
    if (json) {
        fprintf(f,
                "{\"slice_iterations\": %llu, \"slices\": %u, \"max_seconds\": %g, \"bounded\": %s, "
                "\"seconds\": %.3f, \"cpus\": [",
                (unsigned long long)cfg->slice_iterations, cfg->slices, cfg->max_seconds, r->bounded ? "true" : "false",
                r->seconds);
        for (int i = 0; i < r->ncpus; i++) {
            const struct cpuspeed_cpu *c = &r->cpu[i];
            fprintf(f,
                    "%s{\"cpu\": %d, \"slices\": %u, \"min_ns\": %llu, \"p50_ns\": %llu, \"p90_ns\": %llu, "
                    "\"max_ns\": %llu, \"slice_ns\": [",
                    i ? ", " : "", c->cpu, c->slices, (unsigned long long)c->min_ns, (unsigned long long)c->p50_ns,
                    (unsigned long long)c->p90_ns, (unsigned long long)c->max_ns);
            for (uint32_t s = 0; s < c->slices; s++)
                fprintf(f, "%s%llu", s ? ", " : "", (unsigned long long)c->slice_ns[s]);
            fprintf(f, "]}");
        }
        fprintf(f, "]}\n");
        return;
    }
    fprintf(f, "%llu multiply-adds a slice, %u slices a CPU, %.2f s%s\n", (unsigned long long)cfg->slice_iterations,
            cfg->slices, r->seconds, r->bounded ? " (--max-seconds ended some CPU's slices early)" : "");
    fprintf(f, "%4s %7s %10s %10s %10s %10s %9s %7s\n", "cpu", "slices", "min_us", "p50_us", "p90_us", "max_us",
            "max/min", "lost_%");
    for (int i = 0; i < r->ncpus; i++) {
        const struct cpuspeed_cpu *c = &r->cpu[i];
        double sum = 0;
        for (uint32_t s = 0; s < c->slices; s++)
            sum += (double)c->slice_ns[s];
        /* lost_%: the share of the check's time beyond its fastest slice's pace (analysis/cpuspeed.py
         * takes the fastest of a whole capture instead) */
        fprintf(f, "%4d %7u %10.1f %10.1f %10.1f %10.1f %9.2f %7.1f\n", c->cpu, c->slices, c->min_ns / 1e3,
                c->p50_ns / 1e3, c->p90_ns / 1e3, c->max_ns / 1e3,
                c->min_ns ? (double)c->max_ns / (double)c->min_ns : 0.0,
                sum > 0 ? 100.0 * (sum - (double)c->slices * (double)c->min_ns) / sum : 0.0);
    }
}

int cpuspeed_pace(uint64_t slice_iterations, uint32_t slices, struct cpuspeed_pace *out)
{
    uint64_t ns[CPUSPEED_PACE_MAX_SLICES];

    memset(out, 0, sizeof *out);
    if (slices < 1 || slices > CPUSPEED_PACE_MAX_SLICES || slice_iterations < 1000)
        return util_fail(UTIL_EINVAL, "%u pace slices of %llu iterations: give 1 to %d slices of 1000 or more", slices,
                         (unsigned long long)slice_iterations, CPUSPEED_PACE_MAX_SLICES);
    out->slices = cpuspeed_time_slices(slice_iterations, slices, UINT64_MAX, ns);
    util_sort_u64(ns, out->slices);
    out->min_ns = ns[0];
    out->p50_ns = ns[(out->slices - 1) * 50 / 100];
    return UTIL_OK;
}

void cpuspeed_pace_json(FILE *f, const struct cpuspeed_pace *p)
{
    fprintf(f, "{\"slices\": %u, \"min_ns\": %llu, \"p50_ns\": %llu}", p->slices, (unsigned long long)p->min_ns,
            (unsigned long long)p->p50_ns);
}

void cpuspeed_free(struct cpuspeed_result *r)
{
    for (int i = 0; i < CPUSPEED_MAX_CPUS; i++) {
        free(r->cpu[i].slice_ns);
        r->cpu[i].slice_ns = NULL;
    }
}
