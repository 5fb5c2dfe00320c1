#include "bench.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/resource.h>

#include "procs.h"
#include "util.h"
#include "wire.h"

/* Where the threads meet between their warm-up and their measured calls, so that the measured
 * window (the first measured call's start to the last one's end) holds measured calls only. A
 * thread that stops early passes it too; if a thread cannot be created, the rest stop waiting. */
struct bench_gate {
    pthread_mutex_t lock;
    pthread_cond_t open;
    int arrived, expected;
};

struct bench_thread {
    const struct bench_config *cfg;
    struct bench_gate *gate;
    int passed_gate;
    int index;
    uint64_t *samples;
    uint64_t nsamples, errors, mismatches, first_ns, last_counter;
    struct client_stats stats;
    int cpu;
    char error[256];
    uint64_t start_ns, end_ns;
    /* Context switches over the measured calls: voluntary ones are the thread's sleeps, so
     * per call they show which waits blocked (the path's shape) without tracing anything. */
    uint64_t vol_switches, invol_switches;
    struct cpuspeed_pace pace_before, pace_after; /* the first thread's (bench_config.pace_slices) */
    uint64_t turns, turn_waits;                   /* the first thread's (bench_config.turn_in_fd) */
};

static void gate_pass(struct bench_thread *t)
{
    struct bench_gate *g = t->gate;
    if (t->passed_gate)
        return;
    t->passed_gate = 1;
    pthread_mutex_lock(&g->lock);
    if (++g->arrived >= g->expected)
        pthread_cond_broadcast(&g->open);
    while (g->arrived < g->expected)
        pthread_cond_wait(&g->open, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* The gate expects only the threads that exist (pthread_create failed for the others). */
static void gate_expect(struct bench_gate *g, int n)
{
    pthread_mutex_lock(&g->lock);
    g->expected = n;
    if (g->arrived >= g->expected)
        pthread_cond_broadcast(&g->open);
    pthread_mutex_unlock(&g->lock);
}

/* The calling thread's voluntary and involuntary context switches so far. */
static void thread_switches(uint64_t *vol, uint64_t *invol)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru)) {
        *vol = *invol = 0;
        return;
    }
    *vol = (uint64_t)ru.ru_nvcsw;
    *invol = (uint64_t)ru.ru_nivcsw;
}

/* The workload's arguments, varied per call so that a stale reply cannot pass the check. */
struct workload {
    uint8_t *data;
    int32_t *ints;
    char *s1, *s2;
    int64_t int_sum;
    void *value; /* a plugged-in procedure's argument value */
    uint32_t value_sum, value_len;
};

static int workload_init(struct workload *w, int proc, uint32_t size)
{
    memset(w, 0, sizeof *w);
    w->data = malloc(size + 4);
    w->ints = malloc(((size_t)size + 1) * sizeof(int32_t));
    w->s1 = malloc(size / 2 + 1);
    w->s2 = malloc(size - size / 2 + 1);
    if (!w->data || !w->ints || !w->s1 || !w->s2)
        return util_fail(UTIL_ENOMEM, "malloc(workload of %u bytes)", size);
    for (uint32_t i = 0; i < size; i++)
        w->data[i] = (uint8_t)(i * 29u + 3u);
    for (uint32_t i = 0; i < size; i++) {
        w->ints[i] = (int32_t)(i * 7919u) - 100000;
        w->int_sum += w->ints[i];
    }
    for (uint32_t i = 0; i < size / 2; i++)
        w->s1[i] = (char)('a' + i % 26);
    for (uint32_t i = 0; i < size - size / 2; i++)
        w->s2[i] = (char)('A' + i % 26);
    if (proc_is_plugin(proc)) {
        const struct procs_table *t = procs_plugin();
        w->value = calloc(1, t->value_size(proc));
        if (!w->value)
            return util_fail(UTIL_ENOMEM, "malloc(%s value)", t->name(proc));
        return t->sample(proc, w->value, 0x5eed + (uint64_t)proc, &w->value_sum, &w->value_len);
    }
    return UTIL_OK;
}

static void workload_free(struct workload *w)
{
    free(w->data);
    free(w->ints);
    free(w->s1);
    free(w->s2);
    free(w->value);
}

static void make_args(struct workload *w, int proc, uint32_t size, uint32_t seq, struct proc_args *a)
{
    memset(a, 0, sizeof *a);
    a->value = w->value;
    switch (proc) {
    case PROC_MAXRESULT: a->n = size; break;
    case PROC_ADD:
        a->a = (int32_t)seq;
        a->b = 1000;
        break;
    case PROC_SUM:
        a->ints = w->ints;
        a->nints = size;
        break;
    case PROC_CONCAT:
        a->s1 = w->s1;
        a->len1 = size / 2;
        a->s2 = w->s2;
        a->len2 = size - size / 2;
        break;
    default:
        if (size >= 4)
            memcpy(w->data, &seq, 4);
        a->data = w->data;
        a->len = size;
        break;
    }
}

/* 0 if the result is what the procedure must return for these arguments. */
static int check_result(const struct workload *w, int proc, const struct proc_args *a, const struct proc_result *r,
                        uint64_t *last_counter)
{
    switch (proc) {
    case PROC_INCR:
        if (r->counter <= *last_counter)
            return util_fail(UTIL_EMISMATCH, "incr returned %llu after %llu", (unsigned long long)r->counter,
                             (unsigned long long)*last_counter);
        *last_counter = r->counter;
        return UTIL_OK;
    case PROC_MAXRESULT:
        if (r->len != a->n)
            return util_fail(UTIL_EMISMATCH, "maxresult returned %u bytes, asked %u", r->len, a->n);
        for (uint32_t i = 0; i < r->len; i++)
            if (r->data[i] != proc_pattern_byte(i))
                return util_fail(UTIL_EMISMATCH, "maxresult byte %u differs", i);
        return UTIL_OK;
    case PROC_ADD:
        return r->i == (int32_t)((uint32_t)a->a + (uint32_t)a->b)
                   ? UTIL_OK
                   : util_fail(UTIL_EMISMATCH, "add(%d, %d) returned %d", a->a, a->b, r->i);
    case PROC_SUM:
        return r->sum == w->int_sum ? UTIL_OK : util_fail(UTIL_EMISMATCH, "sum returned %lld", (long long)r->sum);
    case PROC_CONCAT:
        if (r->len != a->len1 + a->len2 || memcmp(r->data, a->s1, a->len1) || memcmp(r->data + a->len1, a->s2, a->len2))
            return util_fail(UTIL_EMISMATCH, "concat returned the wrong string (%u bytes)", r->len);
        return UTIL_OK;
    case PROC_ECHO:
        if (r->len != a->len || (uint32_t)r->i != a->len || memcmp(r->data, a->data, a->len))
            return util_fail(UTIL_EMISMATCH, "echo returned different bytes (%u of %u)", r->len, a->len);
        return UTIL_OK;
    case PROC_COURIER:
        return (uint32_t)r->i == a->len ? UTIL_OK : util_fail(UTIL_EMISMATCH, "courier returned %d", r->i);
    default:
        if (proc_is_plugin(proc) && (r->checksum != w->value_sum || r->len != w->value_len))
            return util_fail(UTIL_EMISMATCH,
                             "%s: the server unmarshalled another value (checksum %08x of %u "
                             "bytes, expected %08x of %u)",
                             proc_name(proc), r->checksum, r->len, w->value_sum, w->value_len);
        return UTIL_OK;
    }
}

static void *bench_thread_main(void *arg)
{
    struct bench_thread *t = arg;
    const struct bench_config *cfg = t->cfg;
    struct client c;
    struct workload w;
    struct proc_args a;
    struct proc_result r;
    uint64_t stop_at, vol0 = 0, invol0 = 0, vol1, invol1;
    struct turns turns;
    int rc, counting = 0, yielded;

    if (cfg->ncpus && util_pin_cpu(cfg->cpus[t->index % cfg->ncpus])) {
        snprintf(t->error, sizeof t->error, "%s", util_error());
        gate_pass(t);
        return NULL;
    }
    if (workload_init(&w, cfg->proc, cfg->size) || client_open(&c, &cfg->client, (uint64_t)t->index + 1)) {
        snprintf(t->error, sizeof t->error, "%s", util_error());
        t->errors++;
        workload_free(&w);
        gate_pass(t);
        return NULL;
    }
    turns_init(&turns, t->index == 0 ? cfg->turn_in_fd : -1, cfg->turn_out_fd, cfg->turn_calls, cfg->turn_ns);
    if (turns_wait(&turns)) {
        snprintf(t->error, sizeof t->error, "%s", util_error());
        t->errors++;
        goto out;
    }
    if (cfg->pace_slices && t->index == 0 &&
        cpuspeed_pace(BENCH_PACE_SLICE_ITERATIONS, cfg->pace_slices, &t->pace_before))
        snprintf(t->error, sizeof t->error, "%s", util_error());
    stop_at = util_now_ns() + (uint64_t)(cfg->max_seconds * 1e9);
    for (uint64_t i = 0; i < 1 + cfg->warmup + cfg->calls; i++) {
        uint64_t t0, t1;
        if (i == 1 + cfg->warmup) {
            gate_pass(t);
            thread_switches(&vol0, &invol0);
            counting = 1;
        }
        make_args(&w, cfg->proc, cfg->size, c.seq + 1, &a);
        t0 = util_now_ns();
        if (i == 1 + cfg->warmup)
            t->start_ns = t0;
        rc = proc_call(&c, cfg->proc, &a, &r);
        t1 = util_now_ns();
        if (!rc && cfg->check)
            rc = check_result(&w, cfg->proc, &a, &r, &t->last_counter);
        if (rc) {
            if (!t->error[0])
                snprintf(t->error, sizeof t->error, "%s", util_error());
            if (rc == UTIL_EMISMATCH)
                t->mismatches++;
            else
                t->errors++;
            if (rc == UTIL_ESYS || rc == UTIL_ETIMEDOUT || rc == UTIL_EINVAL)
                break; /* the binding is unusable or the server is gone */
        } else if (cfg->proc == PROC_INCR && !cfg->check) {
            t->last_counter = r.counter;
        }
        if (i == 0)
            t->first_ns = t1 - t0;
        else if (i > cfg->warmup && !rc)
            t->samples[t->nsamples++] = t1 - t0;
        if (i > cfg->warmup)
            t->end_ns = t1;
        if (t1 > stop_at)
            break;
        if (turns_after_call(&turns, util_now_ns(), &yielded)) {
            if (!t->error[0])
                snprintf(t->error, sizeof t->error, "%s", util_error());
            t->errors++;
            break;
        }
        t->turn_waits += (uint64_t)(yielded && counting);
    }
    thread_switches(&vol1, &invol1);
    if (cfg->pace_slices && t->index == 0 &&
        cpuspeed_pace(BENCH_PACE_SLICE_ITERATIONS, cfg->pace_slices, &t->pace_after) && !t->error[0])
        snprintf(t->error, sizeof t->error, "%s", util_error());
    if (counting) {
        t->vol_switches = vol1 - vol0;
        t->invol_switches = invol1 - invol0;
    }
    t->stats = c.stats;
    t->turns = turns.count;
out:
    gate_pass(t);
    t->cpu = util_current_cpu();
    client_close(&c);
    workload_free(&w);
    return NULL;
}

/* The histogram of n sorted RTTs in bins of bin_ns from the fastest call's bin. */
static void bench_histogram(const uint64_t *sorted, uint64_t n, uint32_t bin_ns, struct bench_result *res)
{
    res->hist_bin_ns = bin_ns;
    if (!bin_ns || !n)
        return;
    res->hist_from_ns = sorted[0] / bin_ns * bin_ns;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t b = (sorted[i] - res->hist_from_ns) / bin_ns;
        if (b >= BENCH_HIST_BINS) {
            res->hist_above = n - i; /* sorted: every later call is beyond too */
            break;
        }
        res->hist[b]++;
        res->hist_len = (uint32_t)b + 1;
    }
}

int bench_run(const struct bench_config *cfg, struct bench_result *res)
{
    struct bench_thread *ts = calloc((size_t)cfg->threads, sizeof *ts);
    struct bench_gate gate = { .lock = PTHREAD_MUTEX_INITIALIZER,
                               .open = PTHREAD_COND_INITIALIZER,
                               .expected = cfg->threads };
    uint64_t *all = NULL, n = 0, start = UINT64_MAX, end = 0;
    int rc = UTIL_OK, started = 0;
    pthread_t tids[BENCH_MAX_THREADS];

    memset(res, 0, sizeof *res);
    /* Recorded so that a capture can check its --aslr took effect (0xffffffff only queries). */
    res->aslr_off = (personality(0xffffffff) & ADDR_NO_RANDOMIZE) != 0;
    if (!ts)
        return util_fail(UTIL_ENOMEM, "calloc(bench threads)");
    for (int i = 0; i < cfg->threads; i++) {
        ts[i].cfg = cfg;
        ts[i].gate = &gate;
        ts[i].index = i;
        ts[i].samples = malloc((cfg->calls + 1) * sizeof(uint64_t));
        if (!ts[i].samples) {
            rc = util_fail(UTIL_ENOMEM, "malloc(%llu samples)", (unsigned long long)cfg->calls);
            goto out;
        }
    }
    for (int i = 0; i < cfg->threads; i++) {
        int e = pthread_create(&tids[i], NULL, bench_thread_main, &ts[i]);
        if (e) {
            rc = util_fail(UTIL_ESYS, "pthread_create(client thread %d) failed", i);
            gate_expect(&gate, started);
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    if (rc)
        goto out;
    all = malloc((cfg->calls * (uint64_t)cfg->threads + 1) * sizeof *all);
    if (!all) {
        rc = util_fail(UTIL_ENOMEM, "malloc(samples)");
        goto out;
    }
    for (int i = 0; i < cfg->threads; i++) {
        struct bench_thread *t = &ts[i];
        memcpy(all + n, t->samples, t->nsamples * sizeof *all);
        n += t->nsamples;
        res->errors += t->errors;
        res->mismatches += t->mismatches;
        if (t->last_counter > res->last_counter)
            res->last_counter = t->last_counter;
        res->client.calls += t->stats.calls;
        res->client.timeouts += t->stats.timeouts;
        res->client.pings += t->stats.pings;
        res->client.retransmitted_frags += t->stats.retransmitted_frags;
        res->client.stale_packets += t->stats.stale_packets;
        res->client.bad_packets += t->stats.bad_packets;
        if (t->stats.first_bad[0] && !res->client.first_bad[0])
            memcpy(res->client.first_bad, t->stats.first_bad, sizeof res->client.first_bad);
        res->client.acks += t->stats.acks;
        res->client.rejects += t->stats.rejects;
        res->vol_switches += t->vol_switches;
        res->invol_switches += t->invol_switches;
        res->placement[i] = t->cpu;
        res->turns += t->turns;
        res->turn_waits += t->turn_waits;
        if (t->start_ns && t->start_ns < start)
            start = t->start_ns;
        if (t->end_ns > end)
            end = t->end_ns;
        if (t->error[0] && !res->first_error[0])
            snprintf(res->first_error, sizeof res->first_error, "%s", t->error);
    }
    res->first_call_ns = ts[0].first_ns;
    res->pace_before = ts[0].pace_before;
    res->pace_after = ts[0].pace_after;
    res->calls = n;
    if (n) {
        double sum = 0;
        util_sort_u64(all, n);
        for (uint64_t i = 0; i < n; i++)
            sum += (double)all[i];
        res->min_ns = all[0];
        res->max_ns = all[n - 1];
        res->p50_ns = all[(n - 1) * 50 / 100];
        res->p90_ns = all[(n - 1) * 90 / 100];
        res->p99_ns = all[(n - 1) * 99 / 100];
        res->mean_ns = sum / (double)n;
        bench_histogram(all, n, cfg->hist_bin_ns, res);
    }
    res->wall_s = end > start ? (double)(end - start) / 1e9 : 0;
    res->calls_per_s = res->wall_s > 0 ? (double)n / res->wall_s : 0;
out:
    for (int i = 0; i < cfg->threads; i++)
        free(ts[i].samples);
    free(ts);
    free(all);
    return rc;
}

void bench_print(const struct bench_config *cfg, const struct bench_result *r, FILE *f, int json)
{
    const char *wire = cfg->client.drep == WIRE_DREP_BIG ? "network" : "native";
    const char *wait = client_wait_name(cfg->client.wait);
    if (json) {
        fprintf(
            f,
            "{\"transport\": \"%s\", \"proc\": \"%s\", \"size\": %u, \"calls\": %llu, \"errors\": %llu, "
            "\"mismatches\": %llu, \"threads\": %d, \"wait\": \"%s\", \"wire\": \"%s\", \"max_pdu\": %u, \"nb_select\": %s, "
            "\"first_call_ns\": %llu, \"rtt_ns\": {\"min\": %llu, \"p50\": %llu, \"mean\": %.1f, "
            "\"p90\": %llu, \"p99\": %llu, \"max\": %llu}, \"calls_per_s\": %.1f, \"wall_s\": %.6f, "
            "\"last_counter\": %llu, \"client_stats\": {\"timeouts\": %llu, \"pings\": %llu, "
            "\"retransmitted_frags\": %llu, \"stale_packets\": %llu, \"bad_packets\": %llu, "
            "\"acks\": %llu, \"rejects\": %llu}, \"switches\": {\"voluntary\": %llu, "
            "\"involuntary\": %llu}, \"aslr\": \"%s\", \"cpus\": [",
            xport_kind_name(cfg->client.transport), proc_name(cfg->proc), cfg->size, (unsigned long long)r->calls,
            (unsigned long long)r->errors, (unsigned long long)r->mismatches, cfg->threads, wait, wire,
            cfg->client.max_pdu, cfg->client.nb_select ? "true" : "false", (unsigned long long)r->first_call_ns,
            (unsigned long long)r->min_ns, (unsigned long long)r->p50_ns, r->mean_ns, (unsigned long long)r->p90_ns,
            (unsigned long long)r->p99_ns, (unsigned long long)r->max_ns, r->calls_per_s, r->wall_s,
            (unsigned long long)r->last_counter, (unsigned long long)r->client.timeouts,
            (unsigned long long)r->client.pings, (unsigned long long)r->client.retransmitted_frags,
            (unsigned long long)r->client.stale_packets, (unsigned long long)r->client.bad_packets,
            (unsigned long long)r->client.acks, (unsigned long long)r->client.rejects,
            (unsigned long long)r->vol_switches, (unsigned long long)r->invol_switches, r->aslr_off ? "off" : "on");
        for (int i = 0; i < cfg->threads; i++)
            fprintf(f, "%s%d", i ? ", " : "", r->placement[i]);
        fprintf(f, "], \"first_error\": ");
        util_json_string(f, r->first_error);
        fprintf(f, ", \"first_bad_packet\": ");
        util_json_string(f, r->client.first_bad);
        if (cfg->pace_slices) {
            fprintf(f, ", \"pace\": {\"cpu\": %d, \"slice_iterations\": %d, \"before\": ", r->placement[0],
                    BENCH_PACE_SLICE_ITERATIONS);
            cpuspeed_pace_json(f, &r->pace_before);
            fprintf(f, ", \"after\": ");
            cpuspeed_pace_json(f, &r->pace_after);
            fprintf(f, "}");
        }
        if (cfg->turn_in_fd >= 0)
            fprintf(f,
                    ", \"turns\": {\"count\": %llu, \"waits_measured\": %llu, \"turn_calls\": %llu, "
                    "\"turn_us\": %.1f}",
                    (unsigned long long)r->turns, (unsigned long long)r->turn_waits,
                    (unsigned long long)cfg->turn_calls, cfg->turn_calls ? 0.0 : (double)cfg->turn_ns / 1e3);
        if (r->hist_bin_ns) {
            fprintf(f, ", \"rtt_hist\": {\"bin_ns\": %u, \"from_ns\": %llu, \"above\": %llu, \"counts\": [",
                    r->hist_bin_ns, (unsigned long long)r->hist_from_ns, (unsigned long long)r->hist_above);
            for (uint32_t i = 0; i < r->hist_len; i++)
                fprintf(f, "%s%u", i ? ", " : "", r->hist[i]);
            fprintf(f, "]}");
        }
        fprintf(f, "}\n");
        return;
    }
    fprintf(f, "rpc-client: %s %s size=%u threads=%d wait=%s wire=%s max_pdu=%u nb_select=%s\n",
            xport_kind_name(cfg->client.transport), proc_name(cfg->proc), cfg->size, cfg->threads, wait, wire,
            cfg->client.max_pdu, cfg->client.nb_select ? "on" : "off");
    fprintf(f, "first call: %.1f us\n", (double)r->first_call_ns / 1e3);
    fprintf(f, "%-8s %10s %10s %10s %10s %10s %10s %12s\n", "rtt (us)", "min", "p50", "mean", "p90", "p99", "max",
            "calls/s");
    fprintf(f, "%-8s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f %12.0f\n", "", (double)r->min_ns / 1e3,
            (double)r->p50_ns / 1e3, r->mean_ns / 1e3, (double)r->p90_ns / 1e3, (double)r->p99_ns / 1e3,
            (double)r->max_ns / 1e3, r->calls_per_s);
    fprintf(f, "calls %llu, errors %llu, mismatches %llu, timeouts %llu, retransmitted fragments %llu\n",
            (unsigned long long)r->calls, (unsigned long long)r->errors, (unsigned long long)r->mismatches,
            (unsigned long long)r->client.timeouts, (unsigned long long)r->client.retransmitted_frags);
    if (r->calls)
        fprintf(f, "context switches per call: %.2f voluntary (sleeps), %.2f involuntary\n",
                (double)r->vol_switches / (double)r->calls, (double)r->invol_switches / (double)r->calls);
    if (cfg->pace_slices)
        fprintf(f, "CPU %d pace (%d multiply-adds a slice, fastest of %u): %.1f us before, %.1f us after\n",
                r->placement[0], BENCH_PACE_SLICE_ITERATIONS, cfg->pace_slices, (double)r->pace_before.min_ns / 1e3,
                (double)r->pace_after.min_ns / 1e3);
    if (r->first_error[0])
        fprintf(f, "first error: %s\n", r->first_error);
    if (r->client.first_bad[0])
        fprintf(f, "first bad packet: %s\n", r->client.first_bad);
}
