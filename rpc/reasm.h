/* Server-side reassembly of multi-fragment requests, bounded in slots and
 * bytes, with idle slots expired, so a flood of fragments can neither grow
 * memory nor pin it forever. Used by the listener thread only (no locking).
 *
 * Fair sharing: each slot remembers the source (IPv4 address and port) of its
 * call's first fragment; fragments of that call from anywhere else are
 * refused. A source address holds at most per_source slots: a new call from a
 * source at its bound takes the place of that source's least recently touched
 * slot (the source competes with itself, its newest call wins), and a new call
 * that finds the table (slots or bytes) full takes the place of the least
 * recently touched slot of the source holding the most slots; either only if
 * the slot it evicts has been idle at least evict_idle. Otherwise the call gets
 * no slot (UTIL_ENOMEM), and the server answers it with a busy reject. */
#ifndef RPCS_REASM_H
#define RPCS_REASM_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

/* Where a call's fragments come from: IPv4 address and port, network order. */
struct reasm_src {
    uint32_t addr;
    uint16_t port;
};

struct reasm_slot {
    int used;
    struct reasm_src src;
    uint8_t activity[16];
    uint32_t seq;
    uint16_t proc;
    uint8_t drep, flags;
    uint32_t total, nfrags, got, contiguous;
    uint8_t *buf, *map;
    uint64_t touched_ns;
};

/* full: new calls that found a bound (their source's share, the slots or the bytes) reached; of
 * them, evicted took an idle call's place and the rest got no slot. */
struct reasm_stats {
    uint64_t stored, completed, duplicates, conflicts, full, expired, evicted, wrong_source;
};

struct reasm {
    struct reasm_slot *slots;
    uint32_t nslots, max_pdu;
    size_t bytes, max_bytes;
    uint64_t timeout_ns;
    uint32_t per_source;            /* slots one source address may hold (default: all) */
    uint64_t evict_idle_ns;         /* a slot idle this long may be evicted for a new call (default: never) */
    uint32_t *count_addr, *count_n; /* scratch: slots per source address (count_cap entries) */
    size_t count_cap;
    struct reasm_stats stats;
};

enum reasm_result { REASM_STORED = 0, REASM_COMPLETE = 1, REASM_DUPLICATE = 2 };

int reasm_init(struct reasm *r, uint32_t nslots, size_t max_bytes, uint32_t max_pdu, uint32_t timeout_ms);
/* The fair-sharing bounds: per_source slots per source address (0: all), and
 * the idle time after which a slot may be evicted for a new call. */
void reasm_set_sharing(struct reasm *r, uint32_t per_source, uint32_t evict_idle_ms);
void reasm_free(struct reasm *r);
/* Store one checked request fragment (wire_check_frag passed) from src.
 * Returns a reasm_result, or UTIL_ENOMEM when the call gets no slot
 * (fragment dropped), or UTIL_EPROTO when it contradicts earlier fragments of
 * the same call, or UTIL_EINVAL when it comes from another source than the
 * call's first fragment. */
int reasm_add_from(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, const struct reasm_src *src,
                   uint64_t now, struct reasm_slot **slot);
/* The same from one anonymous source (tests and the fuzzer). */
int reasm_add(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, uint64_t now, struct reasm_slot **slot);
/* Slots held by one source address. */
uint32_t reasm_source_slots(const struct reasm *r, uint32_t addr);
struct reasm_slot *reasm_find(struct reasm *r, const uint8_t activity[16], uint32_t seq);
/* Take the completed body out of a slot (the caller frees it) and free the slot. */
uint8_t *reasm_take(struct reasm *r, struct reasm_slot *s);
void reasm_drop(struct reasm *r, struct reasm_slot *s);
/* Free slots idle for longer than the timeout. */
void reasm_expire(struct reasm *r, uint64_t now);

#endif
