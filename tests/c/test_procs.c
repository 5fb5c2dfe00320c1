/* The procedure table without anything plugged in (the RPC library alone, no stub
 * study linked), then with a small table plugged in through procs_register: names,
 * ids, variants, and a plugged-in procedure served by proc_serve (S5-S7). */
#include <string.h>

#include "check.h"
#include "marshal.h"
#include "procs.h"
#include "util.h"
#include "wire.h"

/* One procedure, "toy.word": its value is a uint32_t, marshalled as 4 bytes in the
 * PDU's order; variant 7 is the only one, and it refuses little-endian. */
#define TOY_PROC PROCS_PLUGIN_BASE

static int toy_count(void) { return 1; }
static const char *toy_name(int proc) { return proc == TOY_PROC ? "toy.word" : "unknown"; }
static int toy_by_name(const char *name) { return strcmp(name, "toy.word") ? -1 : TOY_PROC; }
static size_t toy_value_size(int proc) { return proc == TOY_PROC ? 4 : 0; }
static size_t toy_wire_max(int proc) { return proc == TOY_PROC ? 4 : 0; }

static int toy_parse_variant(const char *s, int *variant)
{
    if (strcmp(s, "seven"))
        return util_fail(UTIL_EINVAL, "'%s' is not a toy variant (seven)", s);
    *variant = 7;
    return UTIL_OK;
}

static int toy_check_variant(int variant, uint8_t drep)
{
    return variant == 7 && drep == WIRE_DREP_BIG ? UTIL_OK : util_fail(UTIL_EINVAL, "toy: big-endian only");
}

static int toy_marshal(int proc, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len, uint8_t drep)
{
    uint32_t v;
    if (proc != TOY_PROC || toy_check_variant(variant, drep) || cap < 4)
        return util_fail(UTIL_EINVAL, "toy_marshal");
    memcpy(&v, value, 4);
    buf[0] = (uint8_t)(v >> 24), buf[1] = (uint8_t)(v >> 16), buf[2] = (uint8_t)(v >> 8), buf[3] = (uint8_t)v;
    *len = 4;
    return UTIL_OK;
}

static int toy_unmarshal(int proc, int variant, void *value, const uint8_t *buf, size_t len, uint8_t drep)
{
    uint32_t v;
    if (proc != TOY_PROC || toy_check_variant(variant, drep) || len != 4)
        return util_fail(UTIL_EPROTO, "toy_unmarshal");
    v = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    memcpy(value, &v, 4);
    return UTIL_OK;
}

static int toy_checksum(int proc, const void *value, uint8_t *scratch, size_t cap, uint32_t *sum)
{
    uint32_t v;
    (void)scratch;
    (void)cap;
    if (proc != TOY_PROC)
        return util_fail(UTIL_EINVAL, "toy_checksum");
    memcpy(&v, value, 4);
    *sum = v ^ 0xa5a5a5a5u;
    return UTIL_OK;
}

static int toy_sample(int proc, void *value, uint64_t seed, uint32_t *sum, uint32_t *wire_len)
{
    uint32_t v = (uint32_t)seed;
    memcpy(value, &v, 4);
    *wire_len = 4;
    return toy_checksum(proc, value, NULL, 0, sum);
}

static const struct procs_table toy = {
    .count = toy_count,
    .name = toy_name,
    .by_name = toy_by_name,
    .value_size = toy_value_size,
    .wire_max = toy_wire_max,
    .parse_variant = toy_parse_variant,
    .check_variant = toy_check_variant,
    .marshal = toy_marshal,
    .unmarshal = toy_unmarshal,
    .checksum = toy_checksum,
    .sample = toy_sample,
};

/* Serve one call of proc with body bytes; the reply's two words in out[0..1]. */
static int serve(int proc, int variant, const uint8_t *body, size_t len, uint32_t out[2])
{
    static int32_t ints[256];
    static uint8_t bytes[1024] __attribute__((aligned(16)));
    uint8_t scratch[256], reply[64];
    struct proc_server srv = { .stub_variant = variant };
    struct marshal_dec d, rd;
    struct marshal_enc e;
    int rc;

    marshal_dec_init(&d, body, len, WIRE_DREP_BIG);
    marshal_enc_init(&e, scratch, sizeof scratch, WIRE_DREP_BIG);
    rc = proc_serve(&srv, proc, 1, &d, &e, ints, 256, bytes, sizeof bytes);
    if (rc)
        return rc;
    if (e.total != 8)
        return UTIL_EPROTO;
    marshal_gather(&e, 0, reply, e.total);
    marshal_dec_init(&rd, reply, e.total, WIRE_DREP_BIG);
    marshal_get_u32(&rd, &out[0]);
    marshal_get_u32(&rd, &out[1]);
    return marshal_dec_end(&rd);
}

int main(void)
{
    const uint8_t word[4] = { 0x12, 0x34, 0x56, 0x78 };
    uint32_t out[2] = { 0, 0 }, value = 0, sum = 0, wire_len = 0;
    int variant = -1;

    /* Nothing plugged in: only the RPC's own procedures exist. */
    CHECK(procs_plugin() == NULL);
    CHECK(proc_valid(PROC_NULL) && proc_valid(PROC_COURIER_ONEWAY));
    CHECK(!proc_valid(PROC_COUNT) && !proc_valid(TOY_PROC) && !proc_valid(-1));
    CHECK(!proc_is_plugin(TOY_PROC));
    CHECK_EQ(proc_by_name("echo"), PROC_ECHO);
    CHECK_EQ(proc_by_name("toy.word"), -1);
    CHECK(!strcmp(proc_name(TOY_PROC), "unknown"));
    CHECK(proc_parse_variant("seven", &variant) != UTIL_OK && strstr(util_error(), "no plugged-in"));
    CHECK(serve(TOY_PROC, 7, word, 4, out) != UTIL_OK);

    /* The toy table plugged in. */
    CHECK_EQ(procs_register(&toy), UTIL_OK);
    CHECK(procs_register(&toy) != UTIL_OK && strstr(util_error(), "already"));
    CHECK(procs_plugin() == &toy);
    CHECK(proc_valid(TOY_PROC) && proc_is_plugin(TOY_PROC));
    CHECK(!proc_valid(TOY_PROC + 1) && !proc_is_plugin(PROC_NULL));
    CHECK_EQ(proc_by_name("toy.word"), TOY_PROC);
    CHECK_EQ(proc_by_name("null"), PROC_NULL);
    CHECK(!strcmp(proc_name(TOY_PROC), "toy.word"));
    CHECK(!strcmp(proc_name(PROC_SUM), "sum"));
    CHECK_EQ(proc_max_size(TOY_PROC, 262144), 0);
    CHECK_EQ(proc_parse_variant("seven", &variant), UTIL_OK);
    CHECK_EQ(variant, 7);
    CHECK(proc_parse_variant("eight", &variant) != UTIL_OK && strstr(util_error(), "toy variant"));

    /* S5-S7: the table unmarshals the value, checksums it, the reply carries sum and length. */
    CHECK_EQ(serve(TOY_PROC, 7, word, 4, out), UTIL_OK);
    CHECK_EQ(out[0], 0x12345678u ^ 0xa5a5a5a5u);
    CHECK_EQ(out[1], 4);
    CHECK_EQ(toy_sample(TOY_PROC, &value, 0x12345678u, &sum, &wire_len), UTIL_OK);
    CHECK_EQ(sum, out[0]);
    CHECK_EQ(wire_len, out[1]);
    /* A bad argument is the table's failure, returned as the call's. */
    CHECK_EQ(serve(TOY_PROC, 7, word, 3, out), UTIL_EPROTO);
    /* The RPC's own procedures are unchanged beside it. */
    {
        uint8_t scratch[64], reply[64];
        int32_t ints[8];
        uint8_t bytes[64];
        uint8_t args[8] = { 0, 0, 0, 2, 0, 0, 0, 40 };
        int32_t r = 0;
        struct proc_server srv = { 0 };
        struct marshal_dec d, rd;
        struct marshal_enc e;
        marshal_dec_init(&d, args, sizeof args, WIRE_DREP_BIG);
        marshal_enc_init(&e, scratch, sizeof scratch, WIRE_DREP_BIG);
        CHECK_EQ(proc_serve(&srv, PROC_ADD, 2, &d, &e, ints, 8, bytes, sizeof bytes), UTIL_OK);
        marshal_gather(&e, 0, reply, e.total);
        marshal_dec_init(&rd, reply, e.total, WIRE_DREP_BIG);
        CHECK_EQ(marshal_get_i32(&rd, &r), UTIL_OK);
        CHECK_EQ(r, 42);
    }
    CHECK_DONE("test_procs");
}
