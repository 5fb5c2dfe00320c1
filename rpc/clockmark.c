/* Clock marks: see clockmark.h. */
#include "clockmark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

struct clockmark {
    const char *event;
    uint64_t call_id;
    uint64_t ts_ns;
    int32_t tid;
};

static struct clockmark clockmark_buf[CLOCKMARK_CAPACITY];
static size_t clockmark_next; /* marks recorded; past the capacity (or the ring) they are dropped */
static int clockmark_on;
static int clockmark_ring; /* keep the latest CLOCKMARK_RING_SLOTS only */
static __thread int32_t clockmark_tid;

void clockmark_set_ring(int on) { clockmark_ring = on; }

void clockmark_enable(int on)
{
    if (on && !clockmark_on) /* fault every page in now, not in a call */
        memset(clockmark_buf, 0, clockmark_ring ? CLOCKMARK_RING_SLOTS * sizeof *clockmark_buf : sizeof clockmark_buf);
    __atomic_store_n(&clockmark_on, on, __ATOMIC_RELEASE);
}

/* The slots that hold marks: the capacity, or the ring. */
static size_t clockmark_slots(void) { return clockmark_ring ? CLOCKMARK_RING_SLOTS : CLOCKMARK_CAPACITY; }

void clockmark_record(const char *event, uint64_t call_id)
{
    struct timespec t;
    size_t i;

    if (!__atomic_load_n(&clockmark_on, __ATOMIC_ACQUIRE))
        return;
    clock_gettime(CLOCK_MONOTONIC, &t);
    i = __atomic_fetch_add(&clockmark_next, 1, __ATOMIC_RELAXED);
    if (clockmark_ring)
        i &= CLOCKMARK_RING_SLOTS - 1;
    else if (i >= CLOCKMARK_CAPACITY)
        return;
    if (!clockmark_tid)
        clockmark_tid = (int32_t)syscall(SYS_gettid);
    clockmark_buf[i] =
        (struct clockmark){ event, call_id, (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec, clockmark_tid };
}

size_t clockmark_count(void)
{
    size_t n = __atomic_load_n(&clockmark_next, __ATOMIC_RELAXED);
    return n < clockmark_slots() ? n : clockmark_slots();
}

size_t clockmark_dropped(void)
{
    size_t n = __atomic_load_n(&clockmark_next, __ATOMIC_RELAXED);
    return n > clockmark_slots() ? n - clockmark_slots() : 0;
}

int clockmark_write(const char *path)
{
    int status = UTIL_OK;
    size_t n = clockmark_count();
    size_t first = clockmark_dropped() % clockmark_slots(); /* the oldest kept: past a full ring, the next to go */
    FILE *f = fopen(path, "w");

    if (!f)
        return util_fail_errno("fopen %s", path);
    fprintf(f, "%s marks %zu dropped %zu\n", CLOCKMARK_FORMAT, n, clockmark_dropped());
    for (size_t k = 0; k < n; k++) {
        const struct clockmark *m = &clockmark_buf[clockmark_ring ? (first + k) % CLOCKMARK_RING_SLOTS : k];
        if (!m->event)
            continue; /* a slot taken by a thread still writing it at exit */
        fprintf(f, "%s %d %llu %llu\n", m->event, (int)m->tid, (unsigned long long)m->call_id,
                (unsigned long long)m->ts_ns);
    }
    if (ferror(f))
        status = util_fail(UTIL_ESYS, "write %s: an error writing the clock marks", path);
    if (fclose(f) != 0 && status == UTIL_OK)
        status = util_fail_errno("fclose %s", path);
    return status;
}

__attribute__((constructor)) static void clockmark_start(void)
{
    const char *ring = getenv("RPCS_CLOCKMARK_RING");

    if (!getenv("RPCS_CLOCKMARK_OUT"))
        return;
    clockmark_set_ring(ring && *ring && strcmp(ring, "0") != 0);
    clockmark_enable(1);
}

__attribute__((destructor)) static void clockmark_finish(void)
{
    const char *path = getenv("RPCS_CLOCKMARK_OUT");

    if (!path || !clockmark_on)
        return;
    clockmark_enable(0);
    if (clockmark_write(path) != UTIL_OK)
        fprintf(stderr, "clock marks: %s\n", util_error());
}
