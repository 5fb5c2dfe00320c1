/* Fair sharing of reassembly slots (reasm.h): fragments of a call come from
 * its first fragment's source only; a source holds at most its share, and a
 * new call takes the place of the least recently touched slot of its source
 * (or, with the table full, of any source) only if that slot has been idle
 * long enough; otherwise the call gets no slot. And the reply cache's source
 * binding and acknowledgement state (replycache.h). */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reasm.h"
#include "replycache.h"
#include "util.h"
#include "wire.h"

#define MS 1000000ull

static struct wire_hdr frag(uint8_t act, uint32_t seq, uint32_t f, uint32_t total)
{
    struct wire_hdr h = { .version = WIRE_VERSION, .type = WIRE_REQUEST, .drep = WIRE_DREP_BIG, .seq = seq,
                          .proc = 2, .frag_num = f, .total_len = total };
    memset(h.activity, act, 16);
    h.frag_len = wire_frag_len(f, total, 4096);
    h.flags = f + 1 == wire_frag_count(total, 4096) ? WIRE_F_LASTFRAG : 0;
    return h;
}

static struct reasm_src src(uint32_t host, uint16_t port)
{
    struct reasm_src s = { .addr = htonl(0x7f000000u | host), .port = htons(port) };
    return s;
}

static int add(struct reasm *r, uint8_t act, uint32_t seq, uint32_t f, struct reasm_src from, uint64_t now,
               const uint8_t *body)
{
    struct wire_hdr h = frag(act, seq, f, 8032);
    struct reasm_slot *s = NULL;
    return reasm_add_from(r, &h, body, &from, now, &s);
}

int main(void)
{
    struct reasm r;
    uint8_t *body = calloc(1, 8032);
    struct reasm_src a = src(1, 1000), a2 = src(1, 2000), b = src(2, 1000), c = src(3, 1000);

    /* Defaults keep the old behaviour: no share, no eviction. */
    CHECK_EQ(reasm_init(&r, 4, 1 << 20, 4096, 2000), UTIL_OK);
    CHECK_EQ(r.per_source, 4);
    for (uint8_t i = 0; i < 4; i++)
        CHECK_EQ(add(&r, 10 + i, 1, 0, a, 1000, body), REASM_STORED);
    CHECK_EQ(add(&r, 20, 1, 0, b, 100 * MS, body), UTIL_ENOMEM);
    CHECK_EQ(r.stats.evicted, 0);
    reasm_free(&r);

    /* A share of 2 per address, eviction after 5 ms idle. */
    CHECK_EQ(reasm_init(&r, 4, 1 << 20, 4096, 2000), UTIL_OK);
    reasm_set_sharing(&r, 2, 5);
    CHECK_EQ(r.per_source, 2);
    CHECK_EQ(add(&r, 1, 1, 0, a, 1 * MS, body), REASM_STORED);
    CHECK_EQ(add(&r, 2, 1, 0, a2, 2 * MS, body), REASM_STORED); /* same address, other port: same share */
    CHECK_EQ(reasm_source_slots(&r, a.addr), 2);
    /* The share is full and both are fresh: refused. */
    CHECK_EQ(add(&r, 3, 1, 0, a, 3 * MS, body), UTIL_ENOMEM);
    CHECK_EQ(r.stats.full, 1);
    /* Another address still gets slots: a few sources cannot take them all. */
    CHECK_EQ(add(&r, 4, 1, 0, b, 3 * MS, body), REASM_STORED);
    CHECK_EQ(add(&r, 5, 1, 0, b, 3 * MS, body), REASM_STORED);
    /* Fragments of a call from another source than its first are refused and change nothing. */
    CHECK_EQ(add(&r, 1, 1, 1, b, 4 * MS, body), UTIL_EINVAL);
    CHECK_EQ(r.stats.wrong_source, 1);
    CHECK(reasm_find(&r, (uint8_t[16]){ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, 1)->got == 1);
    /* Touching call 1 makes call 2 the idlest of address a. At 10 ms, a new call of a takes call 2's slot. */
    CHECK_EQ(add(&r, 1, 1, 0, a, 8 * MS, body), REASM_DUPLICATE);
    CHECK_EQ(add(&r, 6, 1, 0, a, 10 * MS, body), REASM_STORED);
    CHECK_EQ(r.stats.evicted, 1);
    CHECK(reasm_find(&r, (uint8_t[16]){ 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2 }, 1) == NULL);
    CHECK(reasm_find(&r, (uint8_t[16]){ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, 1) != NULL);
    CHECK_EQ(reasm_source_slots(&r, a.addr), 2);
    /* The table is full (a: 2, b: 2, a tie). A third address takes the place of the idlest slot of the
     * sources holding the most: b's (touched at 3 ms). */
    CHECK_EQ(add(&r, 7, 1, 0, c, 9 * MS, body), REASM_STORED);
    CHECK_EQ(r.stats.evicted, 2);
    CHECK_EQ(reasm_source_slots(&r, b.addr), 1);
    /* Now a holds the most; its idlest (call 1, touched at 8 ms) is too fresh at 11 ms: refused. */
    CHECK_EQ(add(&r, 8, 1, 0, c, 11 * MS, body), UTIL_ENOMEM);
    /* At 14 ms it is not: it goes, though b's slot (3 ms) is older, because b holds fewer. */
    CHECK_EQ(add(&r, 8, 1, 0, c, 14 * MS, body), REASM_STORED);
    CHECK_EQ(reasm_source_slots(&r, a.addr), 1);
    CHECK_EQ(reasm_source_slots(&r, b.addr), 1);
    CHECK_EQ(r.stats.full, 5); /* every call that found a bound: 2 refused, 3 that evicted */
    CHECK_EQ(r.stats.evicted, 3);
    /* The surviving call of a completes undisturbed, and the bytes add up. */
    CHECK_EQ(add(&r, 6, 1, 1, a, 15 * MS, body), REASM_COMPLETE);
    struct reasm_slot *s = reasm_find(&r, (uint8_t[16]){ 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6 }, 1);
    CHECK(s != NULL);
    free(reasm_take(&r, s));
    CHECK_EQ(r.bytes, 3 * (8032 + 2));
    /* A newer call of an activity abandons its older one only from the same source. */
    uint8_t act7[16];
    memset(act7, 7, 16);
    CHECK_EQ(add(&r, 7, 2, 0, b, 20 * MS, body), REASM_STORED);
    CHECK(reasm_find(&r, act7, 1) != NULL);
    CHECK_EQ(add(&r, 7, 3, 0, c, 30 * MS, body), REASM_STORED);
    CHECK(reasm_find(&r, act7, 1) == NULL);
    CHECK(reasm_find(&r, act7, 2) != NULL);
    CHECK(reasm_find(&r, act7, 3) != NULL);
    reasm_free(&r);

    /* Bytes: a call needing more than the byte bound is refused outright; with the bytes full, the
     * idlest calls make room. */
    CHECK_EQ(reasm_init(&r, 8, 3 * (8032 + 2), 4096, 2000), UTIL_OK);
    reasm_set_sharing(&r, 8, 1);
    struct wire_hdr big = frag(30, 1, 0, 40000);
    struct reasm_slot *bs = NULL;
    CHECK_EQ(reasm_add_from(&r, &big, body, &a, 1 * MS, &bs), UTIL_ENOMEM);
    for (uint8_t i = 0; i < 3; i++)
        CHECK_EQ(add(&r, 40 + i, 1, 0, src(10 + i, 1), (1 + i) * MS, body), REASM_STORED);
    CHECK_EQ(add(&r, 50, 1, 0, src(20, 1), 10 * MS, body), REASM_STORED);
    CHECK_EQ(r.stats.evicted, 1);
    CHECK_EQ(reasm_source_slots(&r, src(10, 1).addr), 0); /* the oldest went */
    CHECK(r.bytes <= r.max_bytes);
    reasm_free(&r);

    /* Reply cache: a call is known from its own source only; acknowledgement marks the activity
     * validated for that source, and a later call from the same source keeps it, from another loses it. */
    struct replycache rc;
    struct replycache_view v;
    struct sockaddr_in from = { .sin_family = AF_INET, .sin_port = htons(5000), .sin_addr.s_addr = htonl(0x7f000001) };
    struct sockaddr_in other = from;
    uint8_t act[16], buf[16];
    other.sin_port = htons(5001);
    memset(act, 9, 16);
    CHECK_EQ(replycache_init(&rc, 8, 1 << 20), UTIL_OK);
    replycache_begin_from(&rc, act, 1, 3, WIRE_DREP_BIG, &from);
    CHECK_EQ(replycache_validate(&rc, act, 1, &from), 0); /* still running */
    CHECK_EQ(replycache_finish(&rc, act, 1, (const uint8_t *)"0123456789", 10, 0), 1);
    CHECK_EQ(replycache_get(&rc, act, 1, &other, 0, buf, sizeof buf, &v), REPLYCACHE_DONE);
    CHECK(!v.same_source && !v.validated && v.reply_len == 10);
    CHECK_EQ(replycache_get(&rc, act, 1, &from, 4, buf, 3, &v), REPLYCACHE_DONE);
    CHECK(v.same_source && !v.validated && !memcmp(buf, "456", 3));
    CHECK_EQ(replycache_validate(&rc, act, 1, &other), 0);
    CHECK_EQ(replycache_validate(&rc, act, 1, &from), 1);
    CHECK_EQ(replycache_validated(&rc, act, &from), 1);
    CHECK_EQ(replycache_validated(&rc, act, &other), 0);
    replycache_begin_from(&rc, act, 2, 3, WIRE_DREP_BIG, &from);
    CHECK_EQ(replycache_validated(&rc, act, &from), 1);
    replycache_begin_from(&rc, act, 3, 3, WIRE_DREP_BIG, &other);
    CHECK_EQ(replycache_validated(&rc, act, &other), 0);
    replycache_free(&rc);

    /* Byte bound: the newest reply is kept, the least recently used ones lose theirs (they still ran). */
    CHECK_EQ(replycache_init(&rc, 16, 100), UTIL_OK);
    uint8_t acts[3][16];
    for (int i = 0; i < 3; i++) {
        memset(acts[i], 0x30 + i, 16);
        replycache_begin_from(&rc, acts[i], 1, 3, WIRE_DREP_BIG, &from);
        CHECK_EQ(replycache_finish(&rc, acts[i], 1, body, 40, 0), 1);
    }
    CHECK(rc.bytes <= 100);
    CHECK_EQ(rc.reply_evictions, 1);
    CHECK_EQ(replycache_get(&rc, acts[0], 1, &from, 0, NULL, 0, &v), REPLYCACHE_RUNNING); /* ran; reply gone */
    CHECK_EQ(replycache_get(&rc, acts[2], 1, &from, 0, NULL, 0, &v), REPLYCACHE_DONE);
    /* Larger than the whole bound: not kept, nothing else evicted for it. */
    uint8_t huge_act[16];
    memset(huge_act, 0x77, 16);
    replycache_begin_from(&rc, huge_act, 1, 3, WIRE_DREP_BIG, &from);
    CHECK_EQ(replycache_finish(&rc, huge_act, 1, body, 101, 0), 0);
    CHECK_EQ(rc.reply_evictions, 1);
    replycache_free(&rc);
    free(body);
    CHECK_DONE("test_reasm_share");
}
