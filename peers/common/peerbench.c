#include "peerbench.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const proc_names[PB_PROC_COUNT] = { "null", "add", "sum", "concat", "echo", "maxarg", "maxresult" };

const char *pb_proc_name(int proc) { return proc >= 0 && proc < PB_PROC_COUNT ? proc_names[proc] : "unknown"; }

uint8_t pb_pattern_byte(uint32_t i) { return (uint8_t)(i * 131u + 7u); }

int pb_pin_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) ? -1 : 0;
}

int pb_write_ready(const char *path, int port)
{
    char tmp[4096];
    FILE *f;
    if (!path)
        return 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        fprintf(stderr, "ready file path too long: %s\n", path);
        return -1;
    }
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d %d\n", (int)getpid(), port) < 0 || fclose(f) || rename(tmp, path)) {
        fprintf(stderr, "cannot write the ready file %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ workload and checks */

static int work_init(struct pb_work *w, uint32_t size, int proc)
{
    memset(w, 0, sizeof *w);
    w->size = size;
    w->b = 1000;
    w->data = calloc(size + 4, 1);
    w->ints = calloc(proc == PB_SUM ? size + 1 : 1, sizeof *w->ints);
    w->len1 = size / 2;
    w->len2 = size - size / 2;
    w->s1 = calloc(w->len1 + 1, 1);
    w->s2 = calloc(w->len2 + 1, 1);
    if (!w->data || !w->ints || !w->s1 || !w->s2)
        return -1;
    for (uint32_t i = 0; i < size; i++)
        w->data[i] = (uint8_t)(i * 7u + 1u);
    if (proc == PB_SUM)
        for (uint32_t i = 0; i < size; i++) {
            w->ints[i] = (int32_t)(i * 2654435761u) >> 8;
            w->int_sum += w->ints[i];
        }
    for (uint32_t i = 0; i < w->len1; i++)
        w->s1[i] = (char)('a' + i % 26);
    for (uint32_t i = 0; i < w->len2; i++)
        w->s2[i] = (char)('A' + i % 26);
    return 0;
}

static void work_free(struct pb_work *w)
{
    free(w->data);
    free(w->ints);
    free(w->s1);
    free(w->s2);
}

static void work_next(struct pb_work *w, uint32_t seq)
{
    w->seq = seq;
    w->a = (int32_t)seq;
    if (w->size >= 4)
        memcpy(w->data, &seq, 4);
}

/* PB_OK if r is what the procedure returns for w's arguments, else PB_MISMATCH with a message. */
static int check(const struct pb_work *w, int proc, const struct pb_result *r, char *err, size_t n)
{
    switch (proc) {
    case PB_ADD:
        if (r->i == (int32_t)((uint32_t)w->a + (uint32_t)w->b))
            return PB_OK;
        snprintf(err, n, "add(%d, %d) returned %d", w->a, w->b, r->i);
        return PB_MISMATCH;
    case PB_SUM:
        if (r->sum == w->int_sum)
            return PB_OK;
        snprintf(err, n, "sum returned %lld, expected %lld", (long long)r->sum, (long long)w->int_sum);
        return PB_MISMATCH;
    case PB_CONCAT:
        if (r->len == w->len1 + w->len2 && !memcmp(r->data, w->s1, w->len1) &&
            !memcmp(r->data + w->len1, w->s2, w->len2))
            return PB_OK;
        snprintf(err, n, "concat returned the wrong string (%u bytes)", r->len);
        return PB_MISMATCH;
    case PB_ECHO:
        if (r->len == w->size && !memcmp(r->data, w->data, w->size))
            return PB_OK;
        snprintf(err, n, "echo returned different bytes (%u of %u)", r->len, w->size);
        return PB_MISMATCH;
    case PB_MAXRESULT:
        if (r->len != w->size) {
            snprintf(err, n, "maxresult returned %u bytes, asked %u", r->len, w->size);
            return PB_MISMATCH;
        }
        for (uint32_t i = 0; i < r->len; i++)
            if (r->data[i] != pb_pattern_byte(i)) {
                snprintf(err, n, "maxresult byte %u differs", i);
                return PB_MISMATCH;
            }
        return PB_OK;
    default: return PB_OK; /* null, maxarg: the call's success is the result */
    }
}

/* ------------------------------------------------------------------ threads */

struct thread {
    pthread_t tid;
    int index, cpu;
    const struct pb_config *cfg;
    const struct pb_ops *ops;
    pthread_barrier_t *start;
    uint64_t *rtt;
    uint64_t done, errors, mismatches, first_ns;
    uint64_t t0, t1;
    char error[256];
};

static void *thread_main(void *arg)
{
    struct thread *t = arg;
    const struct pb_config *cfg = t->cfg;
    struct pb_work w;
    struct pb_result r;
    void *conn = NULL;
    char err[256];
    uint64_t seq = 0, stop_at;
    int rc, ready = 0, inited = 0;

    err[0] = '\0';
    memset(&w, 0, sizeof w);
    if (t->cpu >= 0 && pb_pin_cpu(t->cpu))
        snprintf(t->error, sizeof t->error, "sched_setaffinity(CPU %d): %s", t->cpu, strerror(errno));
    else if ((inited = 1, work_init(&w, cfg->size, cfg->proc)))
        snprintf(t->error, sizeof t->error, "out of memory for a %u-byte workload", cfg->size);
    else if (!(conn = t->ops->connect(cfg, err, sizeof err)))
        snprintf(t->error, sizeof t->error, "connect: %s", err);
    else
        ready = 1;
    if (!ready)
        t->errors++; /* the thread could not call at all: an error, not a silent zero */
    for (uint64_t i = 0; ready && i < cfg->warmup + (cfg->warmup == 0); i++) {
        /* The first call (DCE's first RPC) is timed apart; warm-up calls are checked too. */
        uint64_t t0 = now_ns();
        memset(&r, 0, sizeof r);
        work_next(&w, (uint32_t)++seq);
        rc = t->ops->call(conn, cfg, &w, &r, err, sizeof err);
        if (i == 0)
            t->first_ns = now_ns() - t0;
        if (rc == PB_OK)
            rc = check(&w, cfg->proc, &r, err, sizeof err);
        if (rc != PB_OK) {
            snprintf(t->error, sizeof t->error, "warm-up call %llu: %s", (unsigned long long)i + 1, err);
            if (rc == PB_MISMATCH)
                t->mismatches++;
            else
                t->errors++;
            ready = 0;
        }
    }
    pthread_barrier_wait(t->start);
    t->t0 = now_ns();
    stop_at = t->t0 + (uint64_t)(cfg->max_seconds * 1e9);
    for (uint64_t i = 0; ready && i < cfg->calls; i++) {
        uint64_t a = now_ns(), b;
        if (a > stop_at)
            break;
        memset(&r, 0, sizeof r);
        work_next(&w, (uint32_t)++seq);
        rc = t->ops->call(conn, cfg, &w, &r, err, sizeof err);
        b = now_ns();
        if (rc == PB_OK)
            rc = check(&w, cfg->proc, &r, err, sizeof err);
        if (rc == PB_OK) {
            t->rtt[t->done++] = b - a;
            continue;
        }
        if (!t->error[0])
            snprintf(t->error, sizeof t->error, "call %llu: %s", (unsigned long long)i + 1, err);
        if (rc == PB_MISMATCH)
            t->mismatches++;
        else
            t->errors++;
        if (t->errors + t->mismatches >= 10)
            break; /* a broken peer: stop rather than time out call after call */
    }
    t->t1 = now_ns();
    if (conn)
        t->ops->close(conn);
    if (inited)
        work_free(&w);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *v, uint64_t n, double p)
{
    uint64_t k;
    if (!n)
        return 0;
    k = (uint64_t)(p * (double)(n - 1) + 0.5);
    return v[k < n ? k : n - 1];
}

/* ------------------------------------------------------------------ options */

static void usage(FILE *f, const char *peer, const char *transports)
{
    fprintf(f,
            "usage: %s-client [options]\n"
            "Call a procedure of %s-server repeatedly, check every result, report round-trip times.\n\n"
            "  --server ADDR       server IPv4 address (default 127.0.0.1)\n"
            "  --port N            server port (default: the peer's own: rpcbind, or 7500)\n"
            "  --transport T       %s (default tcp)\n"
            "  --proc P            null add sum concat echo maxarg maxresult\n"
            "  --size N            payload: bytes (concat, echo, maxarg, maxresult), ints (sum)\n"
            "  --calls N           measured calls per thread (default 1000)\n"
            "  --warmup N          warm-up calls per thread, checked, not measured (default 100)\n"
            "  --threads N         client threads, each with its own binding (default 1)\n"
            "  --cpu LIST          pin client threads to CPUs, round robin (e.g. 0 or 0,1)\n"
            "  --max-seconds S     stop measuring after S seconds (default 300)\n"
            "  --deadline-s S      give a call up after this long (default 10)\n"
            "  --json              print one JSON object instead of a table\n",
            peer, peer, transports);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    unsigned long long v;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_cpus(const char *s, struct pb_config *cfg)
{
    char buf[256], *save = NULL, *tok;
    uint64_t v;
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    cfg->ncpus = 0;
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (cfg->ncpus >= PB_MAX_THREADS || parse_u64(tok, 0, 4095, &v))
            return -1;
        cfg->cpus[cfg->ncpus++] = (int)v;
    }
    return cfg->ncpus ? 0 : -1;
}

static int parse_args(int argc, char **argv, const char *peer, const char *transports, struct pb_config *cfg)
{
    static const struct option opts[] = { { "server", 1, 0, 's' },     { "port", 1, 0, 'p' },
                                          { "transport", 1, 0, 'T' },  { "proc", 1, 0, 'P' },
                                          { "size", 1, 0, 'n' },       { "calls", 1, 0, 'c' },
                                          { "warmup", 1, 0, 'w' },     { "threads", 1, 0, 't' },
                                          { "cpu", 1, 0, 'C' },        { "max-seconds", 1, 0, 'm' },
                                          { "deadline-s", 1, 0, 'd' }, { "json", 0, 0, 'j' },
                                          { "help", 0, 0, 'h' },       { 0, 0, 0, 0 } };
    int c, i;
    uint64_t v;
    char *end;
    memset(cfg, 0, sizeof *cfg);
    cfg->peer = peer;
    cfg->server = "127.0.0.1";
    cfg->transport = PB_TCP;
    cfg->calls = 1000;
    cfg->warmup = 100;
    cfg->threads = 1;
    cfg->max_seconds = 300;
    cfg->deadline_s = 10;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 's': cfg->server = optarg; break;
        case 'p':
            bad = parse_u64(optarg, 1, 65535, &v);
            cfg->port = (int)v;
            break;
        case 'T':
            if (!strcmp(optarg, "tcp"))
                cfg->transport = PB_TCP;
            else if (!strcmp(optarg, "udp") && strstr(transports, "udp"))
                cfg->transport = PB_UDP;
            else
                bad = 1;
            break;
        case 'P':
            for (i = 0; i < PB_PROC_COUNT && strcmp(optarg, proc_names[i]); i++)
                ;
            bad = i == PB_PROC_COUNT;
            cfg->proc = i;
            break;
        case 'n':
            bad = parse_u64(optarg, 0, PB_MAX_SIZE, &v);
            cfg->size = (uint32_t)v;
            break;
        case 'c':
            bad = parse_u64(optarg, 1, 10000000, &v);
            cfg->calls = v;
            break;
        case 'w':
            bad = parse_u64(optarg, 0, 1000000, &v);
            cfg->warmup = v;
            break;
        case 't':
            bad = parse_u64(optarg, 1, PB_MAX_THREADS, &v);
            cfg->threads = (int)v;
            break;
        case 'C': bad = parse_cpus(optarg, cfg); break;
        case 'm':
            cfg->max_seconds = strtod(optarg, &end);
            bad = *end || cfg->max_seconds <= 0;
            break;
        case 'd':
            cfg->deadline_s = strtod(optarg, &end);
            bad = *end || cfg->deadline_s <= 0;
            break;
        case 'j': cfg->json = 1; break;
        case 'h': usage(stdout, peer, transports); exit(0);
        default: usage(stderr, peer, transports); return -1;
        }
        if (bad) {
            const char *name = "?";
            for (i = 0; opts[i].name; i++)
                if (opts[i].val == c)
                    name = opts[i].name;
            fprintf(stderr, "%s-client: bad value for --%s: '%s' (see --help)\n", peer, name, optarg);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s-client: unexpected argument '%s' (see --help)\n", peer, argv[optind]);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ run */

int pb_main(int argc, char **argv, const char *peer, const char *transports, const struct pb_ops *ops)
{
    struct pb_config cfg;
    struct thread th[PB_MAX_THREADS];
    pthread_barrier_t start;
    uint64_t *all = NULL, n = 0, errors = 0, mismatches = 0, t0 = UINT64_MAX, t1 = 0, first = 0;
    double mean = 0, wall, cps;
    const char *first_error = "";
    int rc = 1, started = 0;

    if (parse_args(argc, argv, peer, transports, &cfg))
        return 2;
    memset(th, 0, sizeof th);
    if (pthread_barrier_init(&start, NULL, (unsigned)cfg.threads)) {
        fprintf(stderr, "%s-client: pthread_barrier_init failed\n", peer);
        return 1;
    }
    for (int i = 0; i < cfg.threads; i++) {
        th[i].rtt = malloc(cfg.calls * sizeof *th[i].rtt);
        if (!th[i].rtt) {
            fprintf(stderr, "%s-client: out of memory for %llu RTTs\n", peer, (unsigned long long)cfg.calls);
            goto out;
        }
    }
    for (int i = 0; i < cfg.threads; i++) {
        th[i] = (struct thread){ .index = i,
                                 .cpu = cfg.ncpus ? cfg.cpus[i % cfg.ncpus] : -1,
                                 .cfg = &cfg,
                                 .ops = ops,
                                 .start = &start,
                                 .rtt = th[i].rtt };
        if (pthread_create(&th[i].tid, NULL, thread_main, &th[i])) {
            fprintf(stderr, "%s-client: pthread_create failed\n", peer);
            exit(1); /* the barrier would never open: nothing to clean up that exit does not */
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i].tid, NULL);
    all = malloc((cfg.calls * (uint64_t)cfg.threads + 1) * sizeof *all);
    if (!all) {
        fprintf(stderr, "%s-client: out of memory\n", peer);
        goto out;
    }
    for (int i = 0; i < cfg.threads; i++) {
        memcpy(all + n, th[i].rtt, th[i].done * sizeof *all);
        n += th[i].done;
        errors += th[i].errors;
        mismatches += th[i].mismatches;
        t0 = th[i].t0 < t0 ? th[i].t0 : t0;
        t1 = th[i].t1 > t1 ? th[i].t1 : t1;
        if (!first_error[0] && th[i].error[0])
            first_error = th[i].error;
        if (i == 0)
            first = th[i].first_ns;
    }
    qsort(all, n, sizeof *all, cmp_u64);
    for (uint64_t i = 0; i < n; i++)
        mean += (double)all[i];
    mean = n ? mean / (double)n : 0;
    wall = t1 > t0 ? (double)(t1 - t0) / 1e9 : 0;
    cps = wall > 0 ? (double)n / wall : 0;
    if (!first_error[0] && n < cfg.calls * (uint64_t)cfg.threads)
        first_error = "--max-seconds reached before every call was made";
    if (cfg.json) {
        printf(
            "{\"peer\": \"%s\", \"transport\": \"%s\", \"proc\": \"%s\", \"size\": %u, \"calls\": %llu, "
            "\"errors\": %llu, \"mismatches\": %llu, \"checked\": %llu, \"threads\": %d, \"first_call_ns\": %llu, "
            "\"rtt_ns\": {\"min\": %llu, \"p50\": %llu, \"mean\": %.1f, \"p90\": %llu, \"p99\": %llu, "
            "\"max\": %llu}, \"calls_per_s\": %.1f, \"wall_s\": %.6f, \"cpus\": [",
            peer, cfg.transport == PB_UDP ? "udp" : "tcp", pb_proc_name(cfg.proc), cfg.size, (unsigned long long)n,
            (unsigned long long)errors, (unsigned long long)mismatches, (unsigned long long)n, cfg.threads,
            (unsigned long long)first, (unsigned long long)(n ? all[0] : 0), (unsigned long long)pct(all, n, 0.5), mean,
            (unsigned long long)pct(all, n, 0.9), (unsigned long long)pct(all, n, 0.99),
            (unsigned long long)(n ? all[n - 1] : 0), cps, wall);
        for (int i = 0; i < cfg.ncpus; i++)
            printf("%s%d", i ? ", " : "", cfg.cpus[i]);
        printf("], \"first_error\": \"");
        for (const char *p = first_error; *p; p++)
            if (*p == '"' || *p == '\\')
                printf("\\%c", *p);
            else if ((unsigned char)*p >= 0x20)
                putchar(*p);
        printf("\"}\n");
    } else {
        printf("%s-client: %s %s size=%u threads=%d\n", peer, cfg.transport == PB_UDP ? "udp" : "tcp",
               pb_proc_name(cfg.proc), cfg.size, cfg.threads);
        printf("first call: %.1f us\n", (double)first / 1e3);
        printf("%-8s %10s %10s %10s %10s %10s %10s %12s\n", "rtt (us)", "min", "p50", "mean", "p90", "p99", "max",
               "calls/s");
        printf("%-8s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %12.0f\n", "", n ? (double)all[0] / 1e3 : 0,
               (double)pct(all, n, 0.5) / 1e3, mean / 1e3, (double)pct(all, n, 0.9) / 1e3,
               (double)pct(all, n, 0.99) / 1e3, n ? (double)all[n - 1] / 1e3 : 0, cps);
        printf("calls %llu (every result checked), errors %llu, mismatches %llu\n", (unsigned long long)n,
               (unsigned long long)errors, (unsigned long long)mismatches);
        if (first_error[0])
            printf("first error: %s\n", first_error);
    }
    rc = errors || mismatches || n < cfg.calls * (uint64_t)cfg.threads ? 1 : 0;
out:
    free(all);
    for (int i = 0; i < cfg.threads; i++)
        free(th[i].rtt);
    pthread_barrier_destroy(&start);
    return rc;
}
