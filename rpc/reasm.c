#include "reasm.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int reasm_init(struct reasm *r, uint32_t nslots, size_t max_bytes, uint32_t max_pdu, uint32_t timeout_ms)
{
    memset(r, 0, sizeof *r);
    r->slots = calloc(nslots ? nslots : 1, sizeof *r->slots);
    for (r->count_cap = 2; r->count_cap < 2 * (size_t)nslots; r->count_cap *= 2) {
    }
    r->count_addr = calloc(r->count_cap, sizeof *r->count_addr);
    r->count_n = calloc(r->count_cap, sizeof *r->count_n);
    if (!r->slots || !r->count_addr || !r->count_n) {
        reasm_free(r);
        return util_fail(UTIL_ENOMEM, "calloc(%u reassembly slots)", nslots);
    }
    r->nslots = nslots;
    r->max_bytes = max_bytes;
    r->max_pdu = max_pdu;
    r->timeout_ns = (uint64_t)timeout_ms * 1000000u;
    r->per_source = nslots;
    r->evict_idle_ns = UINT64_MAX;
    return UTIL_OK;
}

void reasm_set_sharing(struct reasm *r, uint32_t per_source, uint32_t evict_idle_ms)
{
    r->per_source = per_source && per_source < r->nslots ? per_source : r->nslots;
    r->evict_idle_ns = (uint64_t)evict_idle_ms * 1000000u;
}

uint32_t reasm_source_slots(const struct reasm *r, uint32_t addr)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->nslots; i++)
        n += r->slots[i].used && r->slots[i].src.addr == addr;
    return n;
}

void reasm_drop(struct reasm *r, struct reasm_slot *s)
{
    if (!s->used)
        return;
    r->bytes -= s->total + s->nfrags;
    free(s->buf);
    free(s->map);
    memset(s, 0, sizeof *s);
}

void reasm_free(struct reasm *r)
{
    for (uint32_t i = 0; r->slots && i < r->nslots; i++)
        reasm_drop(r, &r->slots[i]);
    free(r->slots);
    free(r->count_addr);
    free(r->count_n);
    r->slots = NULL;
    r->count_addr = r->count_n = NULL;
}

struct reasm_slot *reasm_find(struct reasm *r, const uint8_t activity[16], uint32_t seq)
{
    for (uint32_t i = 0; i < r->nslots; i++) {
        struct reasm_slot *s = &r->slots[i];
        if (s->used && s->seq == seq && !memcmp(s->activity, activity, 16))
            return s;
    }
    return NULL;
}

/* Evict victim for a new call if it has been idle long enough; 1 if it was. */
static int evict(struct reasm *r, struct reasm_slot *victim, uint64_t now)
{
    if (!victim || now < victim->touched_ns || now - victim->touched_ns < r->evict_idle_ns)
        return 0;
    reasm_drop(r, victim);
    r->stats.evicted++;
    return 1;
}

/* Slots held by a's address, from the counts greediest() made; the table's
 * size is a power of two at least twice the slots, so probing ends. */
static uint32_t *count_of(struct reasm *r, uint32_t addr)
{
    size_t i = (addr * 2654435761u) & (r->count_cap - 1);
    while (r->count_n[i] && r->count_addr[i] != addr)
        i = (i + 1) & (r->count_cap - 1);
    r->count_addr[i] = addr;
    return &r->count_n[i];
}

/* The victim when the table is full: the least recently touched slot of the
 * source address that holds the most slots. */
static struct reasm_slot *greediest(struct reasm *r)
{
    struct reasm_slot *best = NULL;
    uint32_t best_n = 0;
    memset(r->count_n, 0, r->count_cap * sizeof *r->count_n);
    for (uint32_t i = 0; i < r->nslots; i++)
        if (r->slots[i].used)
            ++*count_of(r, r->slots[i].src.addr);
    for (uint32_t i = 0; i < r->nslots; i++) {
        struct reasm_slot *t = &r->slots[i];
        if (!t->used)
            continue;
        uint32_t n = *count_of(r, t->src.addr);
        if (!best || n > best_n || (n == best_n && t->touched_ns < best->touched_ns)) {
            best = t;
            best_n = n;
        }
    }
    return best;
}

int reasm_add_from(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, const struct reasm_src *src,
                   uint64_t now, struct reasm_slot **out)
{
    struct reasm_slot *s = NULL, *free_slot = NULL, *lru_src = NULL;
    uint32_t body_per = wire_frag_body(r->max_pdu), held = 0;

    for (uint32_t i = 0; i < r->nslots; i++) {
        struct reasm_slot *t = &r->slots[i];
        if (!t->used) {
            if (!free_slot)
                free_slot = t;
            continue;
        }
        if (!memcmp(t->activity, h->activity, 16)) {
            if (t->seq == h->seq) {
                s = t;
                continue;
            }
            if ((int32_t)(h->seq - t->seq) > 0 && t->src.addr == src->addr && t->src.port == src->port) {
                reasm_drop(r, t); /* the client moved on: its older call is abandoned */
                if (!free_slot)
                    free_slot = t;
                continue;
            }
        }
        if (t->src.addr == src->addr) {
            held++;
            if (!lru_src || t->touched_ns < lru_src->touched_ns)
                lru_src = t;
        }
    }
    if (s && (s->src.addr != src->addr || s->src.port != src->port)) {
        r->stats.wrong_source++;
        return util_fail(UTIL_EINVAL, "fragment %u of call %u from another source than its first", h->frag_num, h->seq);
    }
    if (!s) {
        uint32_t nfrags = wire_frag_count(h->total_len, r->max_pdu);
        size_t need = (size_t)h->total_len + nfrags;
        if (need > r->max_bytes) {
            r->stats.full++;
            return util_fail(UTIL_ENOMEM, "reassembly of %zu bytes exceeds the %zu-byte bound", need, r->max_bytes);
        }
        /* A source at its bound competes with itself: its least recently touched call makes room. */
        int hit = held >= r->per_source; /* counted once per call that finds a bound reached */
        if (hit) {
            r->stats.full++;
            if (!evict(r, lru_src, now))
                return util_fail(UTIL_ENOMEM, "reassembly busy: this source holds %u slots, all active", held);
            if (!free_slot)
                free_slot = lru_src;
        }
        /* The table is full: the least recently touched call of the source holding the most slots makes
         * room, if idle enough. Each pass frees one slot, so this ends. */
        while (!free_slot || r->bytes + need > r->max_bytes) {
            if (!hit) {
                hit = 1;
                r->stats.full++;
            }
            struct reasm_slot *victim = greediest(r);
            if (!evict(r, victim, now))
                return util_fail(UTIL_ENOMEM, "reassembly full (%u slots, %zu of %zu bytes)", r->nslots, r->bytes,
                                 r->max_bytes);
            if (!free_slot)
                free_slot = victim;
        }
        s = free_slot;
        s->buf = malloc(h->total_len ? h->total_len : 1);
        s->map = calloc(nfrags, 1);
        if (!s->buf || !s->map) {
            free(s->buf);
            free(s->map);
            s->buf = s->map = NULL;
            return util_fail(UTIL_ENOMEM, "malloc(reassembly of %u bytes)", h->total_len);
        }
        s->used = 1;
        s->src = *src;
        memcpy(s->activity, h->activity, 16);
        s->seq = h->seq;
        s->proc = h->proc;
        s->drep = h->drep;
        s->flags = h->flags & WIRE_F_ONEWAY;
        s->total = h->total_len;
        s->nfrags = nfrags;
        r->bytes += need;
    } else if (s->total != h->total_len || s->proc != h->proc || s->drep != h->drep) {
        r->stats.conflicts++;
        return util_fail(UTIL_EPROTO, "fragment %u contradicts earlier fragments of call %u", h->frag_num, h->seq);
    }
    *out = s;
    s->touched_ns = now;
    if (s->map[h->frag_num]) {
        r->stats.duplicates++;
        return REASM_DUPLICATE;
    }
    memcpy(s->buf + (size_t)h->frag_num * body_per, body, h->frag_len);
    s->map[h->frag_num] = 1;
    s->got++;
    while (s->contiguous < s->nfrags && s->map[s->contiguous])
        s->contiguous++;
    r->stats.stored++;
    if (s->got == s->nfrags) {
        r->stats.completed++;
        return REASM_COMPLETE;
    }
    return REASM_STORED;
}

int reasm_add(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, uint64_t now, struct reasm_slot **out)
{
    static const struct reasm_src anonymous;
    return reasm_add_from(r, h, body, &anonymous, now, out);
}

uint8_t *reasm_take(struct reasm *r, struct reasm_slot *s)
{
    uint8_t *buf = s->buf;
    s->buf = NULL;
    reasm_drop(r, s);
    return buf;
}

void reasm_expire(struct reasm *r, uint64_t now)
{
    for (uint32_t i = 0; i < r->nslots; i++) {
        struct reasm_slot *s = &r->slots[i];
        if (s->used && now - s->touched_ns > r->timeout_ns) {
            reasm_drop(r, s);
            r->stats.expired++;
        }
    }
}
