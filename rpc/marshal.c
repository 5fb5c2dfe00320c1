#include "marshal.h"

#include <byteswap.h>
#include <string.h>

#include "util.h"
#include "wire.h"

static const uint8_t marshal_zero[4];

static size_t pad4(size_t n) { return (4 - (n & 3)) & 3; }

void marshal_enc_init(struct marshal_enc *e, uint8_t *scratch, size_t cap, uint8_t drep)
{
    memset(e, 0, sizeof *e);
    e->scratch = scratch;
    e->scratch_cap = cap;
    e->drep = drep;
    e->swap = drep != wire_native_drep();
}

static void add_seg(struct marshal_enc *e, const uint8_t *ptr, size_t off, size_t len)
{
    struct marshal_seg *last = e->nseg ? &e->seg[e->nseg - 1] : NULL;
    if (len == 0)
        return;
    /* Consecutive scratch bytes extend the last scratch segment. */
    if (!ptr && last && !last->ptr && last->off + last->len == off) {
        last->len += len;
    } else if (e->nseg == MARSHAL_MAX_SEG) {
        e->status = util_fail(UTIL_ENOMEM, "marshal: more than %d segments", MARSHAL_MAX_SEG);
        return;
    } else {
        e->seg[e->nseg++] = (struct marshal_seg){ .ptr = ptr, .off = off, .len = len };
    }
    e->total += len;
}

static uint8_t *scratch_take(struct marshal_enc *e, size_t len)
{
    uint8_t *p;
    if (e->status)
        return NULL;
    if (e->scratch_cap - e->scratch_len < len) {
        e->status =
            util_fail(UTIL_ENOMEM, "marshal: %zu more bytes exceed the %zu-byte scratch buffer", len, e->scratch_cap);
        return NULL;
    }
    p = e->scratch + e->scratch_len;
    add_seg(e, NULL, e->scratch_len, len);
    e->scratch_len += len;
    return p;
}

uint8_t *marshal_reserve(struct marshal_enc *e, size_t cap)
{
    if (e->status)
        return NULL;
    if (e->scratch_cap - e->scratch_len < cap) {
        e->status = util_fail(UTIL_ENOMEM, "marshal: %zu bytes do not fit the scratch buffer", cap);
        return NULL;
    }
    return e->scratch + e->scratch_len;
}

void marshal_commit(struct marshal_enc *e, size_t len) { (void)scratch_take(e, len); }

void marshal_put_u32(struct marshal_enc *e, uint32_t v)
{
    uint8_t *p = scratch_take(e, 4);
    if (!p)
        return;
    v = e->swap ? bswap_32(v) : v;
    memcpy(p, &v, 4);
}

void marshal_put_i32(struct marshal_enc *e, int32_t v) { marshal_put_u32(e, (uint32_t)v); }

void marshal_put_u64(struct marshal_enc *e, uint64_t v)
{
    uint8_t *p = scratch_take(e, 8);
    if (!p)
        return;
    v = e->swap ? bswap_64(v) : v;
    memcpy(p, &v, 8);
}

void marshal_put_i64(struct marshal_enc *e, int64_t v) { marshal_put_u64(e, (uint64_t)v); }

void marshal_put_opaque(struct marshal_enc *e, const void *data, uint32_t len, int copy)
{
    marshal_put_u32(e, len);
    if (e->status)
        return;
    if (copy) {
        uint8_t *p = scratch_take(e, len);
        if (p && len)
            memcpy(p, data, len);
    } else {
        add_seg(e, data, 0, len);
    }
    if (pad4(len))
        add_seg(e, marshal_zero, 0, pad4(len));
}

void marshal_put_string(struct marshal_enc *e, const char *s, uint32_t len) { marshal_put_opaque(e, s, len, 0); }

void marshal_put_fixed(struct marshal_enc *e, const void *data, uint32_t len)
{
    if (!e->status && len)
        add_seg(e, data, 0, len);
}

void marshal_put_i32_array(struct marshal_enc *e, const int32_t *v, uint32_t n)
{
    marshal_put_u32(e, n);
    if (e->status)
        return;
    if (!e->swap) {
        add_seg(e, (const uint8_t *)v, 0, (size_t)n * 4);
        return;
    }
    uint8_t *p = scratch_take(e, (size_t)n * 4);
    if (!p)
        return;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t w = bswap_32((uint32_t)v[i]);
        memcpy(p + 4 * (size_t)i, &w, 4);
    }
}

void marshal_gather(const struct marshal_enc *e, size_t off, uint8_t *dst, size_t len)
{
    size_t pos = 0;
    for (int i = 0; i < e->nseg && len; i++) {
        const struct marshal_seg *s = &e->seg[i];
        if (off < pos + s->len) {
            size_t skip = off - pos, n = s->len - skip < len ? s->len - skip : len;
            const uint8_t *src = (s->ptr ? s->ptr : e->scratch + s->off) + skip;
            memcpy(dst, src, n);
            dst += n;
            off += n;
            len -= n;
        }
        pos += s->len;
    }
}

void marshal_dec_init(struct marshal_dec *d, const uint8_t *p, size_t len, uint8_t drep)
{
    d->p = p;
    d->len = len;
    d->off = 0;
    d->swap = drep != wire_native_drep();
    d->drep = drep;
    d->status = UTIL_OK;
}

static const uint8_t *take(struct marshal_dec *d, size_t n, const char *what)
{
    const uint8_t *p;
    if (d->status)
        return NULL;
    if (d->len - d->off < n) {
        d->status = util_fail(UTIL_EPROTO, "unmarshal: %s needs %zu bytes at offset %zu, only %zu left", what, n,
                              d->off, d->len - d->off);
        return NULL;
    }
    p = d->p + d->off;
    d->off += n;
    return p;
}

int marshal_get_u32(struct marshal_dec *d, uint32_t *v)
{
    const uint8_t *p = take(d, 4, "u32");
    if (!p)
        return d->status;
    memcpy(v, p, 4);
    if (d->swap)
        *v = bswap_32(*v);
    return UTIL_OK;
}

int marshal_get_i32(struct marshal_dec *d, int32_t *v) { return marshal_get_u32(d, (uint32_t *)v); }

int marshal_get_u64(struct marshal_dec *d, uint64_t *v)
{
    const uint8_t *p = take(d, 8, "u64");
    if (!p)
        return d->status;
    memcpy(v, p, 8);
    if (d->swap)
        *v = bswap_64(*v);
    return UTIL_OK;
}

int marshal_get_i64(struct marshal_dec *d, int64_t *v) { return marshal_get_u64(d, (uint64_t *)v); }

int marshal_get_opaque(struct marshal_dec *d, const uint8_t **data, uint32_t *len, uint32_t max)
{
    uint32_t n = 0;
    const uint8_t *p;
    if (marshal_get_u32(d, &n))
        return d->status;
    if (n > max)
        return d->status = util_fail(UTIL_EPROTO, "unmarshal: count %u exceeds the limit %u", n, max);
    p = take(d, (size_t)n + pad4(n), "opaque data");
    if (!p)
        return d->status;
    *data = p;
    *len = n;
    return UTIL_OK;
}

int marshal_get_string(struct marshal_dec *d, const char **s, uint32_t *len, uint32_t max)
{
    return marshal_get_opaque(d, (const uint8_t **)s, len, max);
}

int marshal_get_rest(struct marshal_dec *d, const uint8_t **data, uint32_t *len)
{
    size_t n = d->status ? 0 : d->len - d->off;
    const uint8_t *p = take(d, n, "fixed array");
    if (!p)
        return d->status;
    *data = p;
    *len = (uint32_t)n;
    return UTIL_OK;
}

int marshal_get_i32_array(struct marshal_dec *d, int32_t *out, uint32_t max, uint32_t *n)
{
    uint32_t count = 0;
    const uint8_t *p;
    if (marshal_get_u32(d, &count))
        return d->status;
    if (count > max)
        return d->status = util_fail(UTIL_EPROTO, "unmarshal: array of %u exceeds the limit %u", count, max);
    p = take(d, (size_t)count * 4, "int array");
    if (!p)
        return d->status;
    memcpy(out, p, (size_t)count * 4);
    if (d->swap)
        for (uint32_t i = 0; i < count; i++)
            out[i] = (int32_t)bswap_32((uint32_t)out[i]);
    *n = count;
    return UTIL_OK;
}

int marshal_dec_end(struct marshal_dec *d)
{
    if (d->status)
        return d->status;
    if (d->off != d->len)
        return d->status = util_fail(UTIL_EPROTO, "unmarshal: %zu trailing bytes", d->len - d->off);
    return UTIL_OK;
}
