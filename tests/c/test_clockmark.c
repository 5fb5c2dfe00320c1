/* rpc/clockmark.c: marks from two threads, written and read back; the capacity bound. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "clockmark.h"
#include "markfile.h"
#include "util.h"

#define PER_THREAD 1000

static void *marker(void *arg)
{
    uint64_t base = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        clockmark_record("c1_begin", base + (uint64_t)i);
        clockmark_record("c1_end", base + (uint64_t)i);
    }
    return NULL;
}

int main(void)
{
    char path[] = "/tmp/test_clockmark_XXXXXX";
    int fd = mkstemp(path);
    pthread_t t[2];
    char line[256];
    size_t lines = 0, begins = 0;
    int tids[2] = {0, 0}, ntids = 0;
    unsigned long long last_ts[2] = {0, 0};
    int ordered = 1;
    FILE *f;

    CHECK(fd >= 0);
    close(fd);

    clockmark_record("c1_begin", 1);                 /* not enabled yet: not recorded */
    CHECK_EQ(clockmark_count(), 0);
    clockmark_enable(1);
    pthread_create(&t[0], NULL, marker, (void *)(uintptr_t)(1ull << 32));
    pthread_create(&t[1], NULL, marker, (void *)(uintptr_t)(2ull << 32));
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    CHECK_EQ(clockmark_count(), 4 * PER_THREAD);
    CHECK_EQ(clockmark_dropped(), 0);
    CHECK_EQ(clockmark_write(path), UTIL_OK);

    f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        CHECK(fgets(line, sizeof line, f) != NULL);
        CHECK(strcmp(line, CLOCKMARK_FORMAT " marks 4000 dropped 0\n") == 0);
        for (struct markfile_line m; markfile_next(f, &m); lines++) {
            int k = m.tid == tids[0] ? 0 : m.tid == tids[1] ? 1 : -1;
            begins += strcmp(m.event, "c1_begin") == 0;
            if (k < 0 && ntids < 2) {
                k = ntids;
                tids[ntids++] = m.tid;
            }
            if (k >= 0) {
                ordered &= m.ts >= last_ts[k];     /* each thread's marks in its own time order */
                last_ts[k] = m.ts;
            }
        }
        fclose(f);
    }
    CHECK_EQ(lines, 4 * PER_THREAD);
    CHECK_EQ(begins, 2 * PER_THREAD);
    CHECK_EQ(ntids, 2);
    CHECK(ordered);

    /* Past the capacity marks are counted, not kept. */
    for (size_t i = clockmark_count(); i < CLOCKMARK_CAPACITY + 5; i++)
        clockmark_record("c1_end", 7);
    CHECK_EQ(clockmark_count(), CLOCKMARK_CAPACITY);
    CHECK_EQ(clockmark_dropped(), 5);
    clockmark_enable(0);
    clockmark_record("c1_end", 7);
    CHECK_EQ(clockmark_dropped(), 5);

    /* A path that cannot be written: a status and a message naming the call. */
    CHECK(clockmark_write("/nonexistent-dir/marks") == UTIL_ESYS);
    CHECK(strstr(util_error(), "fopen /nonexistent-dir/marks") != NULL);

    unlink(path);
    CHECK_DONE("test_clockmark");
}
