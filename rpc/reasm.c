#include "reasm.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int reasm_init(struct reasm *r, uint32_t nslots, size_t max_bytes, uint32_t max_pdu, uint32_t timeout_ms)
{
    memset(r, 0, sizeof *r);
    r->slots = calloc(nslots ? nslots : 1, sizeof *r->slots);
    if (!r->slots)
        return util_fail(UTIL_ENOMEM, "calloc(%u reassembly slots)", nslots);
    r->nslots = nslots;
    r->max_bytes = max_bytes;
    r->max_pdu = max_pdu;
    r->timeout_ns = (uint64_t)timeout_ms * 1000000u;
    return UTIL_OK;
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
    for (uint32_t i = 0; i < r->nslots; i++)
        reasm_drop(r, &r->slots[i]);
    free(r->slots);
    r->slots = NULL;
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

int reasm_add(struct reasm *r, const struct wire_hdr *h, const uint8_t *body, uint64_t now, struct reasm_slot **out)
{
    struct reasm_slot *s = NULL, *free_slot = NULL;
    uint32_t body_per = wire_frag_body(r->max_pdu);

    for (uint32_t i = 0; i < r->nslots; i++) {
        struct reasm_slot *t = &r->slots[i];
        if (!t->used) {
            if (!free_slot)
                free_slot = t;
        } else if (!memcmp(t->activity, h->activity, 16)) {
            if (t->seq == h->seq)
                s = t;
            else if ((int32_t)(h->seq - t->seq) > 0)
                reasm_drop(r, t); /* the client moved on: its older call is abandoned */
        }
    }
    if (!s) {
        uint32_t nfrags = wire_frag_count(h->total_len, r->max_pdu);
        size_t need = (size_t)h->total_len + nfrags;
        if (!free_slot || r->bytes + need > r->max_bytes) {
            r->stats.full++;
            return util_fail(UTIL_ENOMEM, "reassembly full (%u slots, %zu of %zu bytes)", r->nslots, r->bytes,
                             r->max_bytes);
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
