/* Clock marks: every step mark as one clock read into memory, written to a file
 * at exit (make TRACE=clock, build/clock/).
 *
 * The tracepoints' own cost is most of a traced call's time on this VM (~200 ns
 * an event against ~20 ns a clock read), so a step's probe-corrected cost rests
 * on how that cost is charged (analysis/MODEL.md, "Per-step probe charges").
 * The clock build times the user-mark steps with nothing but a vDSO
 * clock_gettime per mark, and `rpcscope capture --clock-reads` runs it beside
 * the traced runs: an independent figure to set each corrected step beside.
 *
 * Recording is on only when RPCS_CLOCKMARK_OUT names the file to write; the
 * buffer is touched at start so that no page fault lands inside a call.
 *
 * With RPCS_CLOCKMARK_RING=1 too, the marks go round a ring of CLOCKMARK_RING_SLOTS
 * (8 KiB) and only the latest are written: what the clock reads cost a call, without
 * the stream of stores into 32 MiB that keeping every mark takes. That stream costs
 * TCP 24096 ~0.35 us more than TCP 0 (the payload's copies share the caches with
 * it), and the probe effect's anchor needs a clock build that pays for the bytes as
 * the untraced one does (analysis/MODEL.md). */
#ifndef RPCS_CLOCKMARK_H
#define RPCS_CLOCKMARK_H

#include <stddef.h>
#include <stdint.h>

/* Marks one process keeps (32 bytes each: 32 MiB); later ones are counted as dropped. */
#define CLOCKMARK_CAPACITY (1u << 20)
/* Marks a run in ring mode keeps (a power of two); earlier ones are counted as dropped. */
#define CLOCKMARK_RING_SLOTS 256u
/* The file's first line (then "event tid call_id ts_ns" per mark, in record order). */
#define CLOCKMARK_FORMAT "rpcscope-clockmarks/1"

/* Record one mark: event is a string literal (the mark's catalog name). */
void clockmark_record(const char *event, uint64_t call_id);
/* Write every mark to path; UTIL_OK or a util status (util_error() says why). */
int clockmark_write(const char *path);
/* Marks recorded and dropped so far. */
size_t clockmark_count(void);
size_t clockmark_dropped(void);
/* Start recording without the environment variable (tests), or stop. */
void clockmark_enable(int on);
/* Keep only the latest CLOCKMARK_RING_SLOTS marks (before clockmark_enable; tests). */
void clockmark_set_ring(int on);

#endif
