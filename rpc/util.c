#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static __thread char util_msg[512];

int util_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(util_msg, sizeof util_msg, fmt, ap);
    va_end(ap);
    return status;
}

int util_fail_errno(const char *fmt, ...)
{
    int saved = errno;
    char head[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    snprintf(util_msg, sizeof util_msg, "%s: %s", head, strerror(saved));
    errno = saved;
    return UTIL_ESYS;
}

const char *util_error(void) { return util_msg[0] ? util_msg : "no error recorded"; }

const char *util_status_name(int status)
{
    switch (status) {
    case UTIL_OK: return "ok";
    case UTIL_ESYS: return "system call failed";
    case UTIL_EINVAL: return "invalid argument";
    case UTIL_ETIMEDOUT: return "timed out";
    case UTIL_EPROTO: return "protocol error";
    case UTIL_ENOMEM: return "out of memory or over a configured bound";
    case UTIL_EREJECT: return "rejected by the server";
    case UTIL_EMISMATCH: return "wrong result";
    default: return "unknown status";
    }
}

uint64_t util_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

void util_sort_u64(uint64_t *v, size_t n) { qsort(v, n, sizeof *v, cmp_u64); }

void util_sleep_ns(uint64_t ns)
{
    struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int util_pin_cpu(int cpu)
{
    cpu_set_t set;
    int rc;
    if (cpu < 0)
        return UTIL_OK;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) {
        errno = rc;
        return util_fail_errno("pthread_setaffinity_np(cpu %d)", cpu);
    }
    return UTIL_OK;
}

int util_parse_cpu_list(const char *s, int *cpus, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 4095 || n >= max)
            return util_fail(UTIL_EINVAL, "bad CPU list '%s' (expected e.g. 0 or 0,1)", s);
        cpus[n++] = (int)v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return util_fail(UTIL_EINVAL, "bad CPU list '%s' (expected e.g. 0 or 0,1)", s);
        p = end;
    }
    if (n == 0)
        return util_fail(UTIL_EINVAL, "empty CPU list");
    return n;
}

int util_current_cpu(void) { return sched_getcpu(); }

void util_rng_seed(struct util_rng *r, uint64_t seed) { r->s = seed ? seed : 0x9e3779b97f4a7c15ull; }

uint64_t util_rng_next(struct util_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

double util_rng_unit(struct util_rng *r) { return (double)(util_rng_next(r) >> 11) / 9007199254740992.0; }

int util_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (!s || !*s || *s == '-')
        return util_fail(UTIL_EINVAL, "'%s' is not a non-negative integer", s ? s : "");
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end)
        return util_fail(UTIL_EINVAL, "'%s' is not a non-negative integer", s);
    if (v < min || v > max)
        return util_fail(UTIL_EINVAL, "%s is out of range [%" PRIu64 ", %" PRIu64 "]", s, min, max);
    *out = v;
    return UTIL_OK;
}

int util_parse_double(const char *s, double min, double max, double *out)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end)
        return util_fail(UTIL_EINVAL, "'%s' is not a number", s);
    if (!(v >= min && v <= max))
        return util_fail(UTIL_EINVAL, "%s is out of range [%g, %g]", s, min, max);
    *out = v;
    return UTIL_OK;
}

void util_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}
