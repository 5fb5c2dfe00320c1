/* PDU header encoding and decoding in both byte orders, and rejection of
 * malformed headers. */
#include <string.h>

#include "check.h"
#include "util.h"
#include "wire.h"

static struct wire_hdr sample(uint8_t drep)
{
    struct wire_hdr h = { .version = WIRE_VERSION, .type = WIRE_REQUEST, .flags = WIRE_F_LASTFRAG, .drep = drep,
                          .boot_time = 0x0102030405060708ull, .seq = 0xa1b2c3d4u, .proc = 7, .frag_num = 0,
                          .frag_len = 12, .total_len = 12, .window = 3, .status = 9 };
    for (int i = 0; i < 16; i++) {
        h.interface_id[i] = (uint8_t)i;
        h.activity[i] = (uint8_t)(0xf0 + i);
    }
    return h;
}

int main(void)
{
    uint8_t buf[WIRE_HDR_LEN + 12];
    struct wire_hdr out;

    for (int o = 0; o < 2; o++) {
        uint8_t drep = o ? WIRE_DREP_LITTLE : WIRE_DREP_BIG;
        struct wire_hdr h = sample(drep);
        memset(buf, 0xee, sizeof buf);
        wire_encode_hdr(&h, buf);
        CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_OK);
        CHECK_EQ(out.seq, h.seq);
        CHECK_EQ(out.proc, h.proc);
        CHECK(out.boot_time == h.boot_time);
        CHECK_EQ(out.window, 3);
        CHECK_EQ(out.status, 9);
        CHECK(!memcmp(out.activity, h.activity, 16));
        CHECK(!memcmp(out.interface_id, h.interface_id, 16));
        /* The byte order really differs on the wire. */
        CHECK_EQ(buf[48], drep == WIRE_DREP_BIG ? 0xa1 : 0xd4);
    }

    struct wire_hdr h = sample(WIRE_DREP_BIG);
    wire_encode_hdr(&h, buf);
    CHECK_EQ(wire_decode_hdr(buf, WIRE_HDR_LEN - 1, &out), UTIL_EPROTO);      /* truncated header */
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf - 1, &out), UTIL_EPROTO);        /* body shorter than claimed */
    buf[0] = 2;
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_EPROTO);            /* version */
    wire_encode_hdr(&h, buf);
    buf[3] = 0x20;
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_EPROTO);            /* drep */
    wire_encode_hdr(&h, buf);
    buf[5] ^= 1;
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_EPROTO);            /* magic */
    wire_encode_hdr(&h, buf);
    buf[1] = WIRE_TYPE_COUNT;
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_EPROTO);            /* type */
    wire_encode_hdr(&h, buf);
    buf[2] = 0x80;
    CHECK_EQ(wire_decode_hdr(buf, sizeof buf, &out), UTIL_EPROTO);            /* flags */

    /* Fragment checks against the limits. */
    h = sample(WIRE_DREP_BIG);
    h.total_len = 10000;
    h.frag_num = 0;
    h.frag_len = 4016;
    h.flags = 0;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_OK);
    h.frag_len = 4015;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_EPROTO);                /* wrong length */
    h.frag_len = 10000 - 2 * 4016;
    h.frag_num = 2;
    h.flags = WIRE_F_LASTFRAG;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_OK);
    h.flags = 0;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_EPROTO);                /* last without the flag */
    h.frag_num = 3;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_EPROTO);                /* past the end */
    h.frag_num = 0;
    h.total_len = 0xffffffffu;
    CHECK_EQ(wire_check_frag(&h, 4096, 1 << 20), UTIL_ENOMEM);                /* absurd size */

    /* The call id is the same on both sides: activity tag and seq. */
    CHECK(wire_call_id(h.activity, 5) == ((uint64_t)0xf0f1f2f3u << 32 | 5));
    CHECK_DONE("test_wire");
}
