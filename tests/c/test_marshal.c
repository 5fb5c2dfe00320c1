/* Marshalling round trips in both byte orders, the iovector (bulk data is
 * referenced, not copied, unless a swap forces it), and decoding limits. */
#include <byteswap.h>
#include <string.h>

#include "check.h"
#include "marshal.h"
#include "util.h"
#include "wire.h"

int main(void)
{
    uint8_t scratch[4096], body[8192];
    int32_t ints[100], back[100];
    uint8_t data[1001];
    struct marshal_enc e;
    struct marshal_dec d;

    for (int i = 0; i < 100; i++)
        ints[i] = i * 1000 - 7;
    for (int i = 0; i < 1001; i++)
        data[i] = (uint8_t)i;

    for (int o = 0; o < 2; o++) {
        uint8_t drep = o ? WIRE_DREP_LITTLE : WIRE_DREP_BIG;
        uint32_t u = 0, n = 0;
        uint64_t big = 0;
        int64_t s64 = 0;
        const uint8_t *p = NULL;
        marshal_enc_init(&e, scratch, sizeof scratch, drep);
        marshal_put_u32(&e, 0xdeadbeef);
        marshal_put_i32_array(&e, ints, 100);
        marshal_put_opaque(&e, data, 1001, 0);
        marshal_put_u64(&e, 0x1122334455667788ull);
        marshal_put_i64(&e, -5);
        CHECK_EQ(e.status, UTIL_OK);
        CHECK_EQ(e.total, 4 + 4 + 400 + 4 + 1001 + 3 + 8 + 8);
        /* The opaque bytes are referenced in place. */
        int referenced = 0;
        for (int i = 0; i < e.nseg; i++)
            referenced |= e.seg[i].ptr == data;
        CHECK(referenced);
        /* Native order references the int array too; network order swaps it into scratch. */
        int ints_referenced = 0;
        for (int i = 0; i < e.nseg; i++)
            ints_referenced |= e.seg[i].ptr == (const uint8_t *)ints;
        CHECK_EQ(ints_referenced, drep == wire_native_drep());

        marshal_gather(&e, 0, body, e.total);
        /* Gathering in pieces gives the same bytes. */
        uint8_t pieces[8192];
        for (size_t off = 0; off < e.total; off += 97)
            marshal_gather(&e, off, pieces + off, e.total - off < 97 ? e.total - off : 97);
        CHECK(!memcmp(body, pieces, e.total));
        CHECK_EQ(body[0], drep == WIRE_DREP_BIG ? 0xde : 0xef);

        marshal_dec_init(&d, body, e.total, drep);
        CHECK_EQ(marshal_get_u32(&d, &u), UTIL_OK);
        CHECK(u == 0xdeadbeef);
        CHECK_EQ(marshal_get_i32_array(&d, back, 100, &n), UTIL_OK);
        CHECK_EQ(n, 100);
        CHECK(!memcmp(back, ints, sizeof ints));
        CHECK_EQ(marshal_get_opaque(&d, &p, &u, 2000), UTIL_OK);
        CHECK_EQ(u, 1001);
        CHECK(p && !memcmp(p, data, 1001));
        CHECK_EQ(marshal_get_u64(&d, &big), UTIL_OK);
        CHECK(big == 0x1122334455667788ull);
        CHECK_EQ(marshal_get_i64(&d, &s64), UTIL_OK);
        CHECK_EQ(s64, -5);
        CHECK_EQ(marshal_dec_end(&d), UTIL_OK);
    }

    /* Decoding limits: counts beyond the data or the limit, trailing bytes. */
    uint32_t claim = bswap_32(1000000);
    const uint8_t *p;
    uint32_t n;
    memcpy(body, &claim, 4);
    marshal_dec_init(&d, body, 8, WIRE_DREP_BIG);
    CHECK_EQ(marshal_get_opaque(&d, &p, &n, 1u << 30), UTIL_EPROTO);
    marshal_dec_init(&d, body, 8, WIRE_DREP_BIG);
    CHECK_EQ(marshal_get_opaque(&d, &p, &n, 10), UTIL_EPROTO);
    claim = bswap_32(0x40000001); /* count * 4 overflows 32 bits */
    memcpy(body, &claim, 4);
    marshal_dec_init(&d, body, 8, WIRE_DREP_BIG);
    CHECK_EQ(marshal_get_i32_array(&d, back, 100, &n), UTIL_EPROTO);
    marshal_dec_init(&d, body, 3, WIRE_DREP_BIG);
    CHECK_EQ(marshal_get_u32(&d, &n), UTIL_EPROTO);
    marshal_dec_init(&d, body, 8, WIRE_DREP_BIG);
    marshal_get_u32(&d, &n);
    CHECK_EQ(marshal_dec_end(&d), UTIL_EPROTO);

    /* A fixed-size array is the body's bytes as they are: no count, no padding, referenced; decoding
     * takes what is left. */
    {
        const uint8_t *fp = NULL;
        uint32_t fn = 0;
        marshal_enc_init(&e, scratch, sizeof scratch, WIRE_DREP_BIG);
        marshal_put_fixed(&e, data, 1001);
        CHECK_EQ(e.status, UTIL_OK);
        CHECK_EQ(e.total, 1001);
        CHECK(e.nseg == 1 && e.seg[0].ptr == data);
        marshal_gather(&e, 0, body, e.total);
        marshal_dec_init(&d, body, e.total, WIRE_DREP_BIG);
        CHECK_EQ(marshal_get_rest(&d, &fp, &fn), UTIL_OK);
        CHECK(fn == 1001 && fp == body && !memcmp(fp, data, 1001));
        CHECK_EQ(marshal_dec_end(&d), UTIL_OK);
        marshal_dec_init(&d, body, 0, WIRE_DREP_BIG);
        CHECK_EQ(marshal_get_rest(&d, &fp, &fn), UTIL_OK);
        CHECK_EQ(fn, 0);
    }

    /* Encoding past the scratch buffer fails cleanly. */
    marshal_enc_init(&e, scratch, 8, WIRE_DREP_BIG);
    marshal_put_u64(&e, 1);
    marshal_put_u32(&e, 1);
    CHECK_EQ(e.status, UTIL_ENOMEM);
    CHECK_DONE("test_marshal");
}
