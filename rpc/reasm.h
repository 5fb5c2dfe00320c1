/* Server-side reassembly of multi-fragment requests, bounded in slots and
 * bytes, with idle slots expired, so a flood of fragments can neither grow
 * memory nor pin it forever. Used by the listener thread only (no locking). */
#ifndef RPCS_REASM_H
#define RPCS_REASM_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct reasm_slot {
    int used;
    uint8_t activity[16];
    uint32_t seq;
    uint16_t proc;
    uint8_t drep, flags;
    uint32_t total, nfrags, got, contiguous;
    uint8_t *buf, *map;
    uint64_t touched_ns;
};

struct reasm_stats { uint64_t stored, completed, duplicates, conflicts, full, expired; };

struct reasm {
    struct reasm_slot *slots;
    uint32_t nslots, max_pdu;
    size_t bytes, max_bytes;
    uint64_t timeout_ns;
    struct reasm_stats stats;
};

enum reasm_result { REASM_STORED = 0, REASM_COMPLETE = 1, REASM_DUPLICATE = 2 };

int reasm_init(struct reasm *r, uint32_t nslots, size_t max_bytes, uint32_t max_pdu, uint32_t timeout_ms);
void reasm_free(struct reasm *r);
/* Store one checked request fragment (wire_check_frag passed). Returns a
 * reasm_result, or UTIL_ENOMEM when the bounds are reached (fragment dropped),
 * or UTIL_EPROTO when it contradicts earlier fragments of the same call. */
int reasm_add(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, uint64_t now, struct reasm_slot **slot);
struct reasm_slot *reasm_find(struct reasm *r, const uint8_t activity[16], uint32_t seq);
/* Take the completed body out of a slot (the caller frees it) and free the slot. */
uint8_t *reasm_take(struct reasm *r, struct reasm_slot *s);
void reasm_drop(struct reasm *r, struct reasm_slot *s);
/* Free slots idle for longer than the timeout. */
void reasm_expire(struct reasm *r, uint64_t now);

#endif
