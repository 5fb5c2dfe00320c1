/* Reassembly: in-order, out-of-order and duplicate fragments, contiguous
 * counts for acknowledgements, the slot and byte bounds, and expiry; and the
 * reply cache's at-most-once states. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reasm.h"
#include "replycache.h"
#include "util.h"
#include "wire.h"

static struct wire_hdr frag(uint8_t act, uint32_t seq, uint32_t f, uint32_t total)
{
    struct wire_hdr h = { .version = WIRE_VERSION, .type = WIRE_REQUEST, .drep = WIRE_DREP_BIG, .seq = seq,
                          .proc = 2, .frag_num = f, .total_len = total };
    memset(h.activity, act, 16);
    h.frag_len = wire_frag_len(f, total, 4096);
    h.flags = f + 1 == wire_frag_count(total, 4096) ? WIRE_F_LASTFRAG : 0;
    return h;
}

int main(void)
{
    struct reasm r;
    struct reasm_slot *s = NULL;
    uint8_t *body = malloc(24096), *got;
    for (int i = 0; i < 24096; i++)
        body[i] = (uint8_t)(i * 13);

    CHECK_EQ(reasm_init(&r, 2, 30000, 4096, 100), UTIL_OK);
    /* Out of order: 0, 2, 1 (duplicate 2), then the rest. */
    uint32_t order[] = { 0, 2, 2, 1, 5, 3, 4 };
    int results[7];
    for (int i = 0; i < 7; i++) {
        struct wire_hdr h = frag(1, 10, order[i], 24096);
        CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_OK);
        results[i] = reasm_add(&r, &h, body + order[i] * 4016, 1000, &s);
        if (i == 0)
            CHECK_EQ(s->contiguous, 1);
        if (i == 1)
            CHECK_EQ(s->contiguous, 1); /* a gap: ack still says 1 */
        if (i == 3)
            CHECK_EQ(s->contiguous, 3);
    }
    CHECK_EQ(results[0], REASM_STORED);
    CHECK_EQ(results[2], REASM_DUPLICATE);
    CHECK_EQ(results[6], REASM_COMPLETE);
    got = reasm_take(&r, s);
    CHECK(got && !memcmp(got, body, 24096));
    free(got);
    CHECK_EQ(r.bytes, 0);

    /* Bounds: a request larger than the byte budget is refused, not allocated. */
    struct wire_hdr big = frag(2, 1, 0, 40000);
    CHECK_EQ(reasm_add(&r, &big, body, 1000, &s), UTIL_ENOMEM);
    /* Slots: two partial calls fill the table, a third is refused. */
    struct wire_hdr a = frag(3, 1, 0, 8032), b = frag(4, 1, 0, 8032), c = frag(5, 1, 0, 8032);
    CHECK_EQ(reasm_add(&r, &a, body, 1000, &s), REASM_STORED);
    CHECK_EQ(reasm_add(&r, &b, body, 1000, &s), REASM_STORED);
    CHECK_EQ(reasm_add(&r, &c, body, 1000, &s), UTIL_ENOMEM);
    /* A fragment contradicting the first (another total) is refused. */
    struct wire_hdr a2 = frag(3, 1, 1, 8033);
    CHECK_EQ(reasm_add(&r, &a2, body, 1000, &s), UTIL_EPROTO);
    /* Idle slots expire and free their bytes. */
    reasm_expire(&r, 1000 + 200 * 1000000ull);
    CHECK_EQ(r.stats.expired, 2);
    CHECK_EQ(r.bytes, 0);
    CHECK_EQ(reasm_add(&r, &c, body, 1000, &s), REASM_STORED);
    /* A newer call of the same activity abandons the older partial one. */
    struct wire_hdr c2 = frag(5, 2, 0, 8032);
    CHECK_EQ(reasm_add(&r, &c2, body, 1000, &s), REASM_STORED);
    CHECK(reasm_find(&r, c.activity, 1) == NULL);
    reasm_free(&r);

    /* Reply cache: none -> running -> done (reply kept) -> old for earlier seqs. */
    struct replycache rc;
    uint8_t act[16], buf[64];
    uint32_t len = 0;
    uint16_t proc = 0;
    uint8_t drep = 0, flags = 0;
    memset(act, 7, 16);
    CHECK_EQ(replycache_init(&rc, 8, 1 << 20), UTIL_OK);
    CHECK_EQ(replycache_lookup(&rc, act, 1, buf, sizeof buf, &len, &proc, &drep, &flags), REPLYCACHE_NONE);
    replycache_begin(&rc, act, 1, 1, WIRE_DREP_BIG);
    CHECK_EQ(replycache_lookup(&rc, act, 1, buf, sizeof buf, &len, &proc, &drep, &flags), REPLYCACHE_RUNNING);
    replycache_finish(&rc, act, 1, (const uint8_t *)"12345678", 8, 0);
    CHECK_EQ(replycache_lookup(&rc, act, 1, buf, sizeof buf, &len, &proc, &drep, &flags), REPLYCACHE_DONE);
    CHECK_EQ(len, 8);
    CHECK(!memcmp(buf, "12345678", 8));
    replycache_begin(&rc, act, 2, 1, WIRE_DREP_BIG);
    CHECK_EQ(replycache_lookup(&rc, act, 1, buf, sizeof buf, &len, &proc, &drep, &flags), REPLYCACHE_OLD);
    /* Many activities: the cache stays within its entries (LRU per set). */
    for (int i = 0; i < 1000; i++) {
        uint8_t other[16];
        memset(other, 0, 16);
        memcpy(other, &i, sizeof i);
        replycache_begin(&rc, other, 1, 1, WIRE_DREP_BIG);
        replycache_finish(&rc, other, 1, (const uint8_t *)"x", 1, 0);
    }
    CHECK(rc.bytes <= 8);
    CHECK(rc.evictions > 0);
    replycache_free(&rc);
    free(body);
    CHECK_DONE("test_reasm");
}
