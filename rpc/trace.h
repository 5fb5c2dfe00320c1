/* The project's one tracing macro.
 *
 *   RPCS_TRACE(c3_begin, call_id, bytes);
 *
 * Event names and payloads come from tracepoints/steps.toml through the
 * generated LTTng-UST provider (build/gen/rpcscope_tp.h), so a mark that is not
 * in the catalog does not compile (in the trace build, which every build of
 * the tree makes). With RPCS_TRACE_ENABLED=0 (make TRACE=0) the macro compiles
 * to nothing: the arguments are type-checked inside a dead branch (so variables
 * used only for tracing do not warn) and no LTTng symbol reaches the binary, as
 * ros2_tracing's TRACEPOINT macro does. With RPCS_TRACE_ENABLED=2 (make
 * TRACE=clock) each mark is one clock read kept in memory (clockmark.h).
 */
#ifndef RPCS_TRACE_H
#define RPCS_TRACE_H

#ifndef RPCS_TRACE_ENABLED
#define RPCS_TRACE_ENABLED 1
#endif

#if RPCS_TRACE_ENABLED == 2
/* make TRACE=clock: each mark one clock read into memory (clockmark.h); the call id, every
 * event's first field, is kept, the other fields are type-checked in a dead branch. */
#include <stdint.h>

#include "clockmark.h"
static inline void trace_discard(int unused, ...) { (void)unused; }
#define RPCS_TRACE_FIRST(first, ...) (first)
#define RPCS_TRACE(event, ...)                                                  \
    do {                                                                        \
        clockmark_record(#event, (uint64_t)(RPCS_TRACE_FIRST(__VA_ARGS__, 0))); \
        if (0)                                                                  \
            trace_discard(0, __VA_ARGS__);                                      \
    } while (0)
#elif RPCS_TRACE_ENABLED
#include "rpcscope_tp.h"
#define RPCS_TRACE(event, ...) lttng_ust_tracepoint(rpcscope, event, __VA_ARGS__)
#else
static inline void trace_discard(int unused, ...) { (void)unused; }
#define RPCS_TRACE(event, ...)             \
    do {                                   \
        if (0)                             \
            trace_discard(0, __VA_ARGS__); \
    } while (0)
#endif

#endif
