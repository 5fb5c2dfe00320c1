/* A minimal test harness: CHECK records a failure and goes on; CHECK_DONE
 * prints "N passed, N failed" (the plain closing line CI reads) and sets the
 * exit status. */
#ifndef RPCS_CHECK_H
#define RPCS_CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            check_passed++;                                                          \
        } else {                                                                     \
            check_failed++;                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                              \
    do {                                                                                            \
        long long check_a = (long long)(a), check_b = (long long)(b);                               \
        if (check_a == check_b) {                                                                   \
            check_passed++;                                                                         \
        } else {                                                                                    \
            check_failed++;                                                                         \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b,   \
                    check_a, check_b);                                                              \
        }                                                                                           \
    } while (0)

#define CHECK_DONE(name)                                                   \
    do {                                                                   \
        printf("%s: %d passed, %d failed\n", name, check_passed, check_failed); \
        return check_failed ? 1 : 0;                                       \
    } while (0)

#endif
