/*
 * stubbench: marshalling without transport, as Chung et al. measured it.
 *
 *   stubbench [--reps N] [--batch-ns NS] [--cpu N] [--proc IFACE_NAME]... [--progress]
 *   stubbench --callgrind K [--proc IFACE_NAME]...   (run under valgrind --tool=callgrind)
 *
 * For every procedure in the registry, every stub kind (compiled,
 * interpreted) and every variant, it times batches of marshal calls into a
 * buffer (no transport) and prints JSON: the median, 10th and 90th
 * percentile of ns per call over N batches. Cells are interleaved round by
 * round so that drift on a noisy machine spreads over all of them alike.
 * Byte copy is timed in network order (it is the design for when bytes must
 * be swapped: this host is little endian), item and block copy in native
 * order; the "swap" cells time item copy in network order as an extra.
 *
 * Under callgrind, --callgrind K runs K calls per cell between
 * CALLGRIND_ZERO_STATS and CALLGRIND_DUMP_STATS_AT("cell N") so that the
 * caller can read instructions per call from the dumps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(s) ((void)(s))
#define RUNNING_ON_VALGRIND 0
#endif

#include "interp.h"
#include "stubreg.h"
#include "stubrt.h"

struct cell {
    const struct stubrt_proc *pr;
    struct interp_desc *d;
    void *val;
    int interp;
    int variant;
    int order;
    int extra;    /* not one of the paper's ten rows */
    size_t batch; /* calls per timed batch */
    size_t bytes; /* marshalled size */
    double *ns;   /* per-call ns, one per round */
};

static uint8_t *buf;
static size_t bufcap;

static inline int run_once(const struct cell *c, size_t *len)
{
    if (c->interp)
        return interp_marshal(c->d, c->variant, c->val, buf, bufcap, len, c->order);
    return c->pr->marshal[c->variant](c->val, buf, bufcap, len, c->order);
}

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns per call over one batch; the status is folded into a sum that is
 * checked once, so the call cannot be optimised away. */
static double time_batch(const struct cell *c, size_t k, int *bad)
{
    size_t len = 0;
    int acc = 0;
    double t0, t1;

    t0 = now_ns();
    for (size_t i = 0; i < k; i++)
        acc |= run_once(c, &len);
    t1 = now_ns();
    if (acc != STUBRT_OK)
        *bad = acc;
    return (t1 - t0) / (double)k;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(double *v, size_t n, double q)
{
    qsort(v, n, sizeof(v[0]), cmp_double);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

static int wanted(const struct stubrt_proc *pr, char **procs, int nprocs)
{
    char name[256];

    if (nprocs == 0)
        return 1;
    snprintf(name, sizeof(name), "%s_%s", pr->iface, pr->name);
    for (int i = 0; i < nprocs; i++)
        if (strcmp(procs[i], name) == 0 || strcmp(procs[i], pr->iface) == 0)
            return 1;
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: stubbench [--reps N] [--batch-ns NS] [--cpu N] [--proc NAME]... [--progress]\n"
            "       stubbench --callgrind K [--proc NAME]...\n");
}

int main(int argc, char **argv)
{
    static const struct {
        int variant, order, extra;
    } rows[] = {
        { STUBRT_INLINE_BYTE, STUBRT_NETWORK, 0 }, { STUBRT_INLINE_ITEM, STUBRT_NATIVE, 0 },
        { STUBRT_PROC_BYTE, STUBRT_NETWORK, 0 },   { STUBRT_PROC_ITEM, STUBRT_NATIVE, 0 },
        { STUBRT_BLOCK, STUBRT_NATIVE, 0 },        { STUBRT_INLINE_ITEM, STUBRT_NETWORK, 1 },
        { STUBRT_PROC_ITEM, STUBRT_NETWORK, 1 },
    };
    const size_t nrows = sizeof(rows) / sizeof(rows[0]);
    char *procs[64], err[200];
    int nprocs = 0, reps = 301, cpu = -1, progress = 0, bad = 0, rc = 1;
    long callgrind = 0;
    double batch_ns = 20000;
    struct cell *cells = NULL;
    size_t ncells = 0;
    uint64_t seed = 42;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch-ns") == 0 && i + 1 < argc)
            batch_ns = atof(argv[++i]);
        else if (strcmp(argv[i], "--cpu") == 0 && i + 1 < argc)
            cpu = atoi(argv[++i]);
        else if (strcmp(argv[i], "--proc") == 0 && i + 1 < argc && nprocs < 64)
            procs[nprocs++] = argv[++i];
        else if (strcmp(argv[i], "--callgrind") == 0 && i + 1 < argc)
            callgrind = atol(argv[++i]);
        else if (strcmp(argv[i], "--progress") == 0)
            progress = 1;
        else {
            usage();
            return 2;
        }
    }
    if (reps < 1 || batch_ns <= 0 || callgrind < 0) {
        usage();
        return 2;
    }
    if (cpu >= 0) {
        /* One CPU for the whole run: no migrations between batches. */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "stubbench: sched_setaffinity(cpu %d): %s (continuing unpinned)\n", cpu, strerror(errno));
    }

    cells = calloc(stubreg_nprocs * 2 * nrows, sizeof(cells[0]));
    if (!cells) {
        fprintf(stderr, "stubbench: calloc: %s\n", strerror(errno));
        goto out;
    }
    for (size_t p = 0; p < stubreg_nprocs; p++) {
        const struct stubrt_proc *pr = stubreg_procs[p];
        struct interp_desc *d;
        void *val;

        if (!wanted(pr, procs, nprocs))
            continue;
        if (interp_parse(pr->desc, &d, err, sizeof(err)) != STUBRT_OK) {
            fprintf(stderr, "stubbench: interp_parse(\"%s\"): %s\n", pr->desc, err);
            goto out;
        }
        if (!(val = calloc(1, pr->args_size))) {
            fprintf(stderr, "stubbench: calloc: %s\n", strerror(errno));
            interp_free(d);
            goto out;
        }
        interp_fill_random(d, val, &seed, 1);
        if (pr->wire_max + 64 > bufcap)
            bufcap = pr->wire_max + 64;
        for (int ip = 0; ip < 2; ip++)
            for (size_t r = 0; r < nrows; r++) {
                struct cell *c = &cells[ncells++];
                c->pr = pr;
                c->d = d;
                c->val = val;
                c->interp = ip;
                c->variant = rows[r].variant;
                c->order = rows[r].order;
                c->extra = rows[r].extra;
            }
    }
    if (!(buf = malloc(bufcap ? bufcap : 1))) {
        fprintf(stderr, "stubbench: malloc: %s\n", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < ncells; i++) {
        struct cell *c = &cells[i];
        int s = run_once(c, &c->bytes);
        if (s != STUBRT_OK) {
            fprintf(stderr, "stubbench: marshal %s_%s %s %s: %s\n", c->pr->iface, c->pr->name,
                    c->interp ? "interpreted" : "compiled", stubrt_variant_name(c->variant), stubrt_strerror(s));
            goto out;
        }
    }

    if (callgrind) {
        char label[64];
        for (size_t i = 0; i < ncells; i++) {
            size_t len;
            int acc = 0;
            snprintf(label, sizeof(label), "cell %zu", i);
            CALLGRIND_ZERO_STATS;
            for (long k = 0; k < callgrind; k++)
                acc |= run_once(&cells[i], &len);
            CALLGRIND_DUMP_STATS_AT(label);
            bad |= acc;
        }
    } else {
        /* Batch size: enough calls to take batch_ns, so that the clock's
		 * own cost and resolution vanish; a warm-up pass first. */
        for (size_t i = 0; i < ncells; i++) {
            struct cell *c = &cells[i];
            size_t k = 1;
            time_batch(c, 64, &bad);
            while (k < (1u << 24) && time_batch(c, k, &bad) * (double)k < batch_ns)
                k *= 2;
            c->batch = k;
            if (!(c->ns = malloc((size_t)reps * sizeof(double)))) {
                fprintf(stderr, "stubbench: malloc: %s\n", strerror(errno));
                goto out;
            }
        }
        for (int r = 0; r < reps; r++) {
            for (size_t i = 0; i < ncells; i++)
                cells[i].ns[r] = time_batch(&cells[i], cells[i].batch, &bad);
            if (progress && (r % 10 == 9 || r == reps - 1))
                fprintf(stderr, "progress %d %d\n", r + 1, reps);
        }
    }
    if (bad) {
        fprintf(stderr, "stubbench: a timed marshal call failed: %s\n", stubrt_strerror(bad));
        goto out;
    }

    printf(
        "{\n  \"reps\": %d, \"batch_ns\": %.0f, \"cpu\": %d, \"callgrind_calls\": %ld, "
        "\"native_order\": \"%c\", \"running_on_valgrind\": %d,\n  \"cells\": [\n",
        reps, batch_ns, cpu, callgrind, (char)STUBRT_NATIVE, (int)RUNNING_ON_VALGRIND);
    for (size_t i = 0; i < ncells; i++) {
        struct cell *c = &cells[i];
        printf(
            "    {\"index\": %zu, \"iface\": \"%s\", \"proc\": \"%s\", \"stub\": \"%s\", \"variant\": \"%s\", "
            "\"order\": \"%s\", \"extra\": %s, \"bytes\": %zu",
            i, c->pr->iface, c->pr->name, c->interp ? "interpreted" : "compiled", stubrt_variant_name(c->variant),
            c->order == STUBRT_NATIVE ? "native" : "network", c->extra ? "true" : "false", c->bytes);
        if (!callgrind) {
            double p10 = quantile(c->ns, (size_t)reps, 0.10);
            double p50 = quantile(c->ns, (size_t)reps, 0.50);
            double p90 = quantile(c->ns, (size_t)reps, 0.90);
            printf(", \"batch\": %zu, \"median_ns\": %.3f, \"p10_ns\": %.3f, \"p90_ns\": %.3f", c->batch, p50, p10,
                   p90);
        }
        printf("}%s\n", i + 1 < ncells ? "," : "");
    }
    printf("  ]\n}\n");
    rc = 0;
out:
    if (cells) {
        for (size_t i = 0; i < ncells; i++) {
            free(cells[i].ns);
            /* d and val are shared by a procedure's cells; the first owns them. */
            if (i % (2 * nrows) == 0) {
                interp_free(cells[i].d);
                free(cells[i].val);
            }
        }
    }
    free(cells);
    free(buf);
    return rc;
}
