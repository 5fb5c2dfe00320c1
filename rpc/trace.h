/* The project's one tracing macro.
 *
 *   RPCS_TRACE(c3_begin, call_id, bytes);
 *
 * Event names and payloads come from tracepoints/steps.toml through the
 * generated LTTng-UST provider (build/gen/rpcscope_tp.h), so a mark that is not
 * in the catalog does not compile. With RPCS_TRACE_ENABLED=0 (make TRACE=0) the
 * macro compiles to nothing: the arguments are type-checked inside a dead
 * branch (so variables used only for tracing do not warn) and no LTTng symbol
 * reaches the binary, as ros2_tracing's TRACEPOINT macro does.
 */
#ifndef RPCS_TRACE_H
#define RPCS_TRACE_H

#ifndef RPCS_TRACE_ENABLED
#define RPCS_TRACE_ENABLED 1
#endif

#if RPCS_TRACE_ENABLED
#include "rpcscope_tp.h"
#define RPCS_TRACE(event, ...) lttng_ust_tracepoint(rpcscope, event, __VA_ARGS__)
#else
static inline void trace_discard(int unused, ...) { (void)unused; }
#define RPCS_TRACE(event, ...) do { if (0) trace_discard(0, __VA_ARGS__); } while (0)
#endif

#endif
