/*
 * stubrt: what compiled stubs, the interpreter and their callers share.
 *
 * Wire format (both compiled and interpreted stubs produce the same bytes):
 *   I       4 bytes, in the message's byte order
 *   S<n>    length as an I, then that many bytes (length <= n)
 *   A[n] T  count as an I (always n), then n elements
 *   record  its fields in order, nothing between them
 * The byte order is a parameter of every call: STUBRT_NETWORK (big endian,
 * swapped on little-endian hosts) or STUBRT_NATIVE, in which case the caller
 * carries the order as a tag (the value of the constant is the tag byte) in
 * its own header so that the receiver can pass it back to unmarshal.
 */
#ifndef STUBRT_H
#define STUBRT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The constants double as the tag byte a sender puts in its header. */
enum stubrt_order {
    STUBRT_BIG = 'B',
    STUBRT_LITTLE = 'L',
};
#define STUBRT_NETWORK STUBRT_BIG
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define STUBRT_NATIVE STUBRT_LITTLE
#else
#define STUBRT_NATIVE STUBRT_BIG
#endif

/* The paper's design alternatives for moving data to and from the buffer. */
enum stubrt_variant {
    STUBRT_INLINE_BYTE, /* inline code, integers moved a byte at a time */
    STUBRT_INLINE_ITEM, /* inline code, integers moved as one item */
    STUBRT_PROC_BYTE,   /* a procedure call per data item, byte at a time */
    STUBRT_PROC_ITEM,   /* a procedure call per data item, one item */
    STUBRT_BLOCK,       /* contiguous runs moved with one memcpy (native order only) */
    STUBRT_NVARIANTS
};

enum stubrt_status {
    STUBRT_OK = 0,
    STUBRT_E_SPACE = -1,    /* marshal: the buffer is too small */
    STUBRT_E_SHORT = -2,    /* unmarshal: the message ends inside a value */
    STUBRT_E_COUNT = -3,    /* unmarshal: an array count is not the declared size */
    STUBRT_E_LENGTH = -4,   /* a string is longer than its declared maximum */
    STUBRT_E_ORDER = -5,    /* unknown byte order, or block copy asked to swap */
    STUBRT_E_TRAILING = -6, /* unmarshal: bytes are left over after the value */
    STUBRT_E_DESC = -7,     /* interpreter: bad type descriptor */
    STUBRT_E_ARG = -8,      /* a NULL pointer or a value buffer of the wrong size */
};

const char *stubrt_strerror(int status);
const char *stubrt_variant_name(int variant);
/* Parses a variant name as printed by stubrt_variant_name; -1 if unknown. */
int stubrt_variant_parse(const char *name);

static inline int stubrt_valid_order(int order) { return order == STUBRT_BIG || order == STUBRT_LITTLE; }

/* Where a procedural stub is in the buffer. Procedures take it by pointer,
 * which is part of what a procedure call costs. */
struct stubrt_cursor {
    uint8_t *p;
    uint8_t *end;
    int order;
};

struct stubrt_rcursor {
    const uint8_t *p;
    const uint8_t *end;
    int order;
};

/* ---- inline movement: used by inline stubs and the interpreter's inline variants */

/* Byte copy: four single-byte moves, which is how a stub swaps without a
 * swap instruction. The shift for each byte comes from the order at run time
 * (x is 24 for big endian, 0 for little), without a branch: the stores stay
 * four separate byte stores, and their cost does not depend on whether the
 * compiler if-converts a branch in one context and not in another. */
static inline void stubrt_store_byte(uint8_t *p, uint32_t v, int order)
{
    const unsigned x = order == STUBRT_BIG ? 24u : 0u;

    p[0] = (uint8_t)(v >> x);
    p[1] = (uint8_t)(v >> (x ^ 8u));
    p[2] = (uint8_t)(v >> (x ^ 16u));
    p[3] = (uint8_t)(v >> (x ^ 24u));
}

static inline uint32_t stubrt_load_byte(const uint8_t *p, int order)
{
    const unsigned x = order == STUBRT_BIG ? 24u : 0u;

    return (uint32_t)p[0] << x | (uint32_t)p[1] << (x ^ 8u) | (uint32_t)p[2] << (x ^ 16u) | (uint32_t)p[3] << (x ^ 24u);
}

/* Item copy: one 4-byte move; a foreign order costs one bswap instruction. */
static inline void stubrt_store_item(uint8_t *p, uint32_t v, int order)
{
    if (order != STUBRT_NATIVE)
        v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}

static inline uint32_t stubrt_load_item(const uint8_t *p, int order)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return order != STUBRT_NATIVE ? __builtin_bswap32(v) : v;
}

/* ---- procedural movement: out of line (stubrt.c), one call per data item */

int stubrt_put_int_byte(struct stubrt_cursor *c, uint32_t v);
int stubrt_put_int_item(struct stubrt_cursor *c, uint32_t v);
/* A string is one data item: its length, then its bytes one at a time. */
int stubrt_put_str_byte(struct stubrt_cursor *c, const char *s, uint32_t len, uint32_t max);
int stubrt_put_str_item(struct stubrt_cursor *c, const char *s, uint32_t len, uint32_t max);

int stubrt_get_int_byte(struct stubrt_rcursor *c, uint32_t *v);
int stubrt_get_int_item(struct stubrt_rcursor *c, uint32_t *v);
int stubrt_get_str_byte(struct stubrt_rcursor *c, char *s, uint32_t *len, uint32_t max);
int stubrt_get_str_item(struct stubrt_rcursor *c, char *s, uint32_t *len, uint32_t max);

/* Block copy: the library's memcpy, always called (the paper's stubs called
 * bcopy). Out of line so that gcc does not expand a constant-size copy into
 * rep movs, which is several times slower than glibc's memcpy here. */
void stubrt_bcopy(void *dst, const void *src, size_t n);

/* ---- what the stub compiler emits for every procedure, for drivers and the RPC */

typedef int (*stubrt_marshal_fn)(const void *args, uint8_t *buf, size_t cap, size_t *len, int order);
typedef int (*stubrt_unmarshal_fn)(void *args, const uint8_t *buf, size_t len, size_t *used, int order);

struct stubrt_proc {
    const char *iface;
    const char *name;
    const char *desc; /* the argument list as written, for interp_parse */
    size_t args_size; /* sizeof the generated args struct */
    size_t wire_max;  /* the most bytes a marshalled value can take */
    stubrt_marshal_fn marshal[STUBRT_NVARIANTS];
    stubrt_unmarshal_fn unmarshal[STUBRT_NVARIANTS];
};

#endif
