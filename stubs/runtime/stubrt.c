/* stubrt: error strings and the out-of-line marshalling procedures that
 * procedural stubs call. They live in their own translation unit so that the
 * compiler cannot inline them into the stubs: the call is what the
 * procedural variants are about. */
#include "stubrt.h"

#include <string.h>

const char *stubrt_strerror(int status)
{
    switch (status) {
    case STUBRT_OK: return "success";
    case STUBRT_E_SPACE: return "buffer too small for the marshalled value";
    case STUBRT_E_SHORT: return "message ends inside a value";
    case STUBRT_E_COUNT: return "array count differs from the declared size";
    case STUBRT_E_LENGTH: return "string longer than its declared maximum";
    case STUBRT_E_ORDER: return "unknown byte order, or block copy cannot swap";
    case STUBRT_E_TRAILING: return "bytes left over after the value";
    case STUBRT_E_DESC: return "bad type descriptor";
    case STUBRT_E_ARG: return "bad argument (NULL pointer or wrong value size)";
    }
    return "unknown status";
}

static const char *const variant_names[STUBRT_NVARIANTS] = {
    "inline-byte", "inline-item", "proc-byte", "proc-item", "block",
};

const char *stubrt_variant_name(int variant)
{
    if (variant < 0 || variant >= STUBRT_NVARIANTS)
        return "unknown";
    return variant_names[variant];
}

int stubrt_variant_parse(const char *name)
{
    for (int v = 0; v < STUBRT_NVARIANTS; v++)
        if (strcmp(name, variant_names[v]) == 0)
            return v;
    return -1;
}

void stubrt_bcopy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

int stubrt_put_int_byte(struct stubrt_cursor *c, uint32_t v)
{
    if (c->end - c->p < 4)
        return STUBRT_E_SPACE;
    stubrt_store_byte(c->p, v, c->order);
    c->p += 4;
    return STUBRT_OK;
}

int stubrt_put_int_item(struct stubrt_cursor *c, uint32_t v)
{
    if (c->end - c->p < 4)
        return STUBRT_E_SPACE;
    stubrt_store_item(c->p, v, c->order);
    c->p += 4;
    return STUBRT_OK;
}

/* The characters go one at a time with a check each, like every other data
 * item in the byte and item variants; only block copy moves them at once. */
static int put_chars(struct stubrt_cursor *c, const char *s, uint32_t len)
{
    uint8_t *p = c->p;
    uint8_t *const end = c->end;

    for (uint32_t i = 0; i < len; i++) {
        if (p == end)
            return STUBRT_E_SPACE;
        *p++ = (uint8_t)s[i];
    }
    c->p = p;
    return STUBRT_OK;
}

int stubrt_put_str_byte(struct stubrt_cursor *c, const char *s, uint32_t len, uint32_t max)
{
    if (len > max)
        return STUBRT_E_LENGTH;
    if (c->end - c->p < 4)
        return STUBRT_E_SPACE;
    stubrt_store_byte(c->p, len, c->order);
    c->p += 4;
    return put_chars(c, s, len);
}

int stubrt_put_str_item(struct stubrt_cursor *c, const char *s, uint32_t len, uint32_t max)
{
    if (len > max)
        return STUBRT_E_LENGTH;
    if (c->end - c->p < 4)
        return STUBRT_E_SPACE;
    stubrt_store_item(c->p, len, c->order);
    c->p += 4;
    return put_chars(c, s, len);
}

int stubrt_get_int_byte(struct stubrt_rcursor *c, uint32_t *v)
{
    if (c->end - c->p < 4)
        return STUBRT_E_SHORT;
    *v = stubrt_load_byte(c->p, c->order);
    c->p += 4;
    return STUBRT_OK;
}

int stubrt_get_int_item(struct stubrt_rcursor *c, uint32_t *v)
{
    if (c->end - c->p < 4)
        return STUBRT_E_SHORT;
    *v = stubrt_load_item(c->p, c->order);
    c->p += 4;
    return STUBRT_OK;
}

static int get_chars(struct stubrt_rcursor *c, char *s, uint32_t len)
{
    const uint8_t *p = c->p;
    const uint8_t *const end = c->end;

    for (uint32_t i = 0; i < len; i++) {
        if (p == end)
            return STUBRT_E_SHORT;
        s[i] = (char)*p++;
    }
    c->p = p;
    return STUBRT_OK;
}

int stubrt_get_str_byte(struct stubrt_rcursor *c, char *s, uint32_t *len, uint32_t max)
{
    uint32_t n;

    if (c->end - c->p < 4)
        return STUBRT_E_SHORT;
    n = stubrt_load_byte(c->p, c->order);
    if (n > max)
        return STUBRT_E_LENGTH;
    c->p += 4;
    *len = n;
    return get_chars(c, s, n);
}

int stubrt_get_str_item(struct stubrt_rcursor *c, char *s, uint32_t *len, uint32_t max)
{
    uint32_t n;

    if (c->end - c->p < 4)
        return STUBRT_E_SHORT;
    n = stubrt_load_item(c->p, c->order);
    if (n > max)
        return STUBRT_E_LENGTH;
    c->p += 4;
    *len = n;
    return get_chars(c, s, n);
}
