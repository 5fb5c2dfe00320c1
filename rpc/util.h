/* Small shared pieces: status codes with a message, time, CPU pinning, a seeded
 * random generator for the test-only drop option, a JSON string. */
#ifndef RPCS_UTIL_H
#define RPCS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Status codes: 0 is success, negative is failure; util_error() says what failed. */
enum util_status {
    UTIL_OK = 0,
    UTIL_ESYS = -1,      /* a system call failed; the message names it and errno */
    UTIL_EINVAL = -2,    /* a bad argument or option */
    UTIL_ETIMEDOUT = -3, /* no answer within the call's deadline */
    UTIL_EPROTO = -4,    /* a malformed or unexpected packet */
    UTIL_ENOMEM = -5,    /* an allocation or a configured bound was exceeded */
    UTIL_EREJECT = -6,   /* the server rejected the call */
    UTIL_EMISMATCH = -7, /* a result differed from the expected one */
};

/* Record a message for the calling thread and return status (for `return util_fail(...)`). */
int util_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, appending ": strerror(errno)". */
int util_fail_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *util_error(void);
const char *util_status_name(int status);

uint64_t util_now_ns(void);
/* Sort n values ascending (timings: bench's RTTs, wakecal's wake-up times). */
void util_sort_u64(uint64_t *v, size_t n);
/* s as a JSON string: quotes, backslashes and control characters escaped. */
void util_json_string(FILE *f, const char *s);
void util_sleep_ns(uint64_t ns);

/* Pin the calling thread to one CPU; cpu < 0 leaves it unpinned. */
int util_pin_cpu(int cpu);
/* Parse "0,1,3" into cpus[]; returns the count, or UTIL_EINVAL. */
int util_parse_cpu_list(const char *s, int *cpus, int max);
/* The CPU the calling thread runs on now (for recording placement). */
int util_current_cpu(void);

/* xorshift64*: fast, seedable, good enough to drop packets reproducibly. */
struct util_rng {
    uint64_t s;
};
void util_rng_seed(struct util_rng *r, uint64_t seed);
uint64_t util_rng_next(struct util_rng *r);
double util_rng_unit(struct util_rng *r);

/* Strict number parsing for options: whole string, within [min, max]. */
int util_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int util_parse_double(const char *s, double min, double max, double *out);

#endif
