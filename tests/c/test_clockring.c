/* rpc/clockmark.c in ring mode (RPCS_CLOCKMARK_RING): only the latest CLOCKMARK_RING_SLOTS marks are
 * kept, written oldest first, the rest counted as dropped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "clockmark.h"
#include "markfile.h"
#include "util.h"

#define MARKS 1000

int main(void)
{
    char path[] = "/tmp/test_clockring_XXXXXX";
    int fd = mkstemp(path);
    char line[256], want[128];
    unsigned long long expect = MARKS - CLOCKMARK_RING_SLOTS, last_ts = 0;
    size_t lines = 0;
    int in_order = 1;
    FILE *f;

    CHECK(fd >= 0);
    close(fd);

    clockmark_set_ring(1);
    clockmark_enable(1);
    for (unsigned long long i = 0; i < CLOCKMARK_RING_SLOTS / 2; i++)
        clockmark_record("c1_begin", i);
    CHECK_EQ(clockmark_count(), CLOCKMARK_RING_SLOTS / 2);          /* not yet round the ring */
    CHECK_EQ(clockmark_dropped(), 0);
    for (unsigned long long i = CLOCKMARK_RING_SLOTS / 2; i < MARKS; i++)
        clockmark_record("c1_begin", i);
    CHECK_EQ(clockmark_count(), CLOCKMARK_RING_SLOTS);
    CHECK_EQ(clockmark_dropped(), MARKS - CLOCKMARK_RING_SLOTS);
    CHECK_EQ(clockmark_write(path), UTIL_OK);

    f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        snprintf(want, sizeof want, "%s marks %u dropped %u\n", CLOCKMARK_FORMAT, CLOCKMARK_RING_SLOTS,
                 MARKS - CLOCKMARK_RING_SLOTS);
        CHECK(fgets(line, sizeof line, f) != NULL);
        CHECK(strcmp(line, want) == 0);
        for (struct markfile_line m; markfile_next(f, &m); lines++) {
            in_order &= m.call_id == expect++ && m.ts >= last_ts;      /* the latest marks, oldest first */
            last_ts = m.ts;
        }
        fclose(f);
    }
    CHECK_EQ(lines, CLOCKMARK_RING_SLOTS);
    CHECK(in_order);
    unlink(path);
    CHECK_DONE("test_clockring");
}
