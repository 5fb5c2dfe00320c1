/* Reading back a clock-marks file (rpc/clockmark.c) in the C tests. */
#ifndef TEST_MARKFILE_H
#define TEST_MARKFILE_H

#include <stdio.h>

struct markfile_line {
    char event[64];
    int tid;
    unsigned long long call_id, ts;
};

/* The next mark line of f into m: 1, or 0 at the end (or at a line that is not a mark). */
static inline int markfile_next(FILE *f, struct markfile_line *m)
{
    char line[256];

    if (!fgets(line, sizeof line, f))
        return 0;
    return sscanf(line, "%63s %d %llu %llu", m->event, &m->tid, &m->call_id, &m->ts) == 4;
}

#endif
