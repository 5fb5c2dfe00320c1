/* interp: the interpreted stub (see interp.h). */
#include "interp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ descriptor parser */

struct pstate {
    const char *s;
    size_t pos;
    struct interp_node *nodes;
    uint32_t n;
    char *err;
    size_t errlen;
};

static int perr(struct pstate *ps, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (ps->err && ps->errlen) {
        k = snprintf(ps->err, ps->errlen, "column %zu: ", ps->pos + 1);
        if (k >= 0 && (size_t)k < ps->errlen) {
            va_start(ap, fmt);
            vsnprintf(ps->err + k, ps->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return STUBRT_E_DESC;
}

static void skip_ws(struct pstate *ps)
{
    while (ps->s[ps->pos] == ' ' || ps->s[ps->pos] == '\t' || ps->s[ps->pos] == '\n' || ps->s[ps->pos] == '\r')
        ps->pos++;
}

static int expect(struct pstate *ps, char ch, const char *what)
{
    skip_ws(ps);
    if (ps->s[ps->pos] != ch)
        return perr(ps, "expected %s", what);
    ps->pos++;
    return STUBRT_OK;
}

static int number(struct pstate *ps, uint32_t *out, const char *what)
{
    uint64_t v = 0;
    size_t start;

    skip_ws(ps);
    start = ps->pos;
    while (ps->s[ps->pos] >= '0' && ps->s[ps->pos] <= '9') {
        v = v * 10 + (uint64_t)(ps->s[ps->pos] - '0');
        if (v > INTERP_MAX_COUNT) {
            ps->pos = start;
            return perr(ps, "%s is larger than %u", what, INTERP_MAX_COUNT);
        }
        ps->pos++;
    }
    if (ps->pos == start)
        return perr(ps, "expected %s", what);
    if (v == 0) {
        ps->pos = start;
        return perr(ps, "%s must be at least 1", what);
    }
    *out = (uint32_t)v;
    return STUBRT_OK;
}

static uint32_t round_up(uint32_t n, uint32_t a) { return (n + a - 1) / a * a; }

static int new_node(struct pstate *ps, uint8_t kind, uint32_t *idx)
{
    if (ps->n >= INTERP_MAX_NODES)
        return perr(ps, "more than %d type codes", INTERP_MAX_NODES);
    *idx = ps->n++;
    memset(&ps->nodes[*idx], 0, sizeof(ps->nodes[*idx]));
    ps->nodes[*idx].kind = kind;
    return STUBRT_OK;
}

/* Lays out record r's fields as a C compiler does: each at a multiple of its
 * alignment, the whole padded to the largest alignment. */
static int layout_record(struct pstate *ps, uint32_t r)
{
    struct interp_node *rec = &ps->nodes[r];
    uint64_t off = 0;
    uint32_t align = 1, k = r + 1;

    for (uint32_t f = 0; f < rec->count; f++) {
        const struct interp_node *fn = &ps->nodes[k];
        off = round_up((uint32_t)off, fn->align) + (uint64_t)fn->size;
        if (off > INTERP_MAX_VALUE)
            return perr(ps, "the value is larger than %u bytes", INTERP_MAX_VALUE);
        if (fn->align > align)
            align = fn->align;
        k += fn->skip;
    }
    rec->align = align;
    rec->size = round_up((uint32_t)off, align);
    rec->skip = ps->n - r;
    return STUBRT_OK;
}

static int parse_type(struct pstate *ps, int depth);

/* '(' type* ')': a record, or the type itself when there is one field. */
static int parse_list(struct pstate *ps, int depth, int toplevel)
{
    uint32_t r, nfields = 0;
    int rc;

    if ((rc = expect(ps, '(', "'('")) != STUBRT_OK)
        goto out;
    if ((rc = new_node(ps, INTERP_REC, &r)) != STUBRT_OK)
        goto out;
    for (;;) {
        skip_ws(ps);
        if (ps->s[ps->pos] == ')')
            break;
        if (ps->s[ps->pos] == '\0') {
            rc = perr(ps, "expected ')'");
            goto out;
        }
        if ((rc = parse_type(ps, depth + 1)) != STUBRT_OK)
            goto out;
        nfields++;
    }
    if (nfields == 0) {
        rc = perr(ps, toplevel ? "an argument list needs at least one argument" : "empty record");
        goto out;
    }
    ps->pos++;
    ps->nodes[r].count = nfields;
    if (nfields == 1 && !toplevel) {
        /* "(T)" is T: drop the record node and move the subtree up. */
        memmove(&ps->nodes[r], &ps->nodes[r + 1], (ps->n - r - 1) * sizeof(ps->nodes[0]));
        ps->n--;
        goto out;
    }
    rc = layout_record(ps, r);
out:
    return rc;
}

static int parse_type(struct pstate *ps, int depth)
{
    struct interp_node *n;
    uint32_t idx, count, elem;
    uint64_t size;
    int rc = STUBRT_OK;

    if (depth > INTERP_MAX_DEPTH) {
        rc = perr(ps, "types nest deeper than %d levels", INTERP_MAX_DEPTH);
        goto out;
    }
    skip_ws(ps);
    switch (ps->s[ps->pos]) {
    case 'I':
        ps->pos++;
        if ((rc = new_node(ps, INTERP_INT, &idx)) != STUBRT_OK)
            goto out;
        n = &ps->nodes[idx];
        n->size = n->align = 4;
        n->skip = 1;
        break;
    case 'S':
        ps->pos++;
        if ((rc = expect(ps, '<', "'<' after S")) != STUBRT_OK ||
            (rc = number(ps, &count, "the string's maximum length")) != STUBRT_OK ||
            (rc = expect(ps, '>', "'>' after the string's maximum length")) != STUBRT_OK ||
            (rc = new_node(ps, INTERP_STR, &idx)) != STUBRT_OK)
            goto out;
        n = &ps->nodes[idx];
        n->count = count;
        n->size = round_up(4 + count, 4);
        n->align = 4;
        n->skip = 1;
        break;
    case 'A':
        ps->pos++;
        if ((rc = expect(ps, '[', "'[' after A")) != STUBRT_OK ||
            (rc = number(ps, &count, "the array's element count")) != STUBRT_OK ||
            (rc = expect(ps, ']', "']' after the array's element count")) != STUBRT_OK ||
            (rc = new_node(ps, INTERP_ARR, &idx)) != STUBRT_OK)
            goto out;
        elem = ps->n;
        if ((rc = parse_type(ps, depth + 1)) != STUBRT_OK)
            goto out;
        n = &ps->nodes[idx];
        size = (uint64_t)count * ps->nodes[elem].size;
        if (size > INTERP_MAX_VALUE) {
            rc = perr(ps, "the array is larger than %u bytes", INTERP_MAX_VALUE);
            goto out;
        }
        n->count = count;
        n->size = (uint32_t)size;
        n->align = ps->nodes[elem].align;
        n->skip = ps->n - idx;
        break;
    case '(': rc = parse_list(ps, depth, 0); break;
    case '\0': rc = perr(ps, "expected a type, found the end of the descriptor"); break;
    default: rc = perr(ps, "expected a type (I, S<n>, A[n] type or a record), found '%c'", ps->s[ps->pos]); break;
    }
out:
    return rc;
}

static uint64_t wire_max(const struct interp_node *nodes, uint32_t i)
{
    const struct interp_node *n = &nodes[i];
    uint64_t sum = 0;

    switch (n->kind) {
    case INTERP_INT: return 4;
    case INTERP_STR: return 4 + (uint64_t)n->count;
    case INTERP_ARR: return 4 + (uint64_t)n->count * wire_max(nodes, i + 1);
    default:
        for (uint32_t f = 0, k = i + 1; f < n->count; f++, k += nodes[k].skip)
            sum += wire_max(nodes, k);
        return sum;
    }
}

int interp_parse(const char *text, struct interp_desc **out, char *err, size_t errlen)
{
    struct pstate ps = { .s = text, .err = err, .errlen = errlen };
    struct interp_desc *d = NULL;
    uint64_t wm;
    int rc;

    if (err && errlen)
        err[0] = '\0';
    if (!text || !out) {
        rc = STUBRT_E_ARG;
        goto out;
    }
    *out = NULL;
    ps.nodes = calloc(INTERP_MAX_NODES, sizeof(ps.nodes[0]));
    if (!ps.nodes) {
        rc = perr(&ps, "calloc failed");
        goto out;
    }
    if ((rc = parse_list(&ps, 0, 1)) != STUBRT_OK)
        goto out;
    skip_ws(&ps);
    if (ps.s[ps.pos] != '\0') {
        rc = perr(&ps, "unexpected '%c' after the argument list", ps.s[ps.pos]);
        goto out;
    }
    wm = wire_max(ps.nodes, 0);
    if (wm > 4ull * INTERP_MAX_VALUE) {
        rc = perr(&ps, "a marshalled value could take %llu bytes, too many", (unsigned long long)wm);
        goto out;
    }
    d = malloc(sizeof(*d) + ps.n * sizeof(d->nodes[0]));
    if (!d) {
        rc = perr(&ps, "malloc failed");
        goto out;
    }
    d->nnodes = ps.n;
    d->size = ps.nodes[0].size;
    d->wire_max = (size_t)wm;
    memcpy(d->nodes, ps.nodes, ps.n * sizeof(d->nodes[0]));
    *out = d;
    d = NULL;
out:
    free(ps.nodes);
    free(d);
    return rc;
}

void interp_free(struct interp_desc *d) { free(d); }

/* ================================================================ marshal */

/* The interpreter's state: the cursor lives in memory, as in any generic
 * interpreter that recurses, and every data item goes through put_int or one
 * of the array and string loops, chosen by the variant. */
struct mctx {
    struct stubrt_cursor c;
    int variant;
    const struct interp_node *nodes;
};

static inline uint32_t ld32(const uint8_t *v)
{
    uint32_t x;
    memcpy(&x, v, 4);
    return x;
}

static inline void st32(uint8_t *v, uint32_t x) { memcpy(v, &x, 4); }

static int put_int(struct mctx *m, uint32_t v)
{
    switch (m->variant) {
    case STUBRT_INLINE_BYTE:
        if (m->c.end - m->c.p < 4)
            return STUBRT_E_SPACE;
        stubrt_store_byte(m->c.p, v, m->c.order);
        m->c.p += 4;
        return STUBRT_OK;
    case STUBRT_INLINE_ITEM:
    case STUBRT_BLOCK:
        if (m->c.end - m->c.p < 4)
            return STUBRT_E_SPACE;
        stubrt_store_item(m->c.p, v, m->c.order);
        m->c.p += 4;
        return STUBRT_OK;
    case STUBRT_PROC_BYTE: return stubrt_put_int_byte(&m->c, v);
    default: return stubrt_put_int_item(&m->c, v);
    }
}

/* An array of integers: the element code is decoded once, then a loop. */
static int put_int_array(struct mctx *m, const uint8_t *v, uint32_t n)
{
    uint8_t *p = m->c.p, *const end = m->c.end;
    const int order = m->c.order;
    int rc = STUBRT_OK;

    switch (m->variant) {
    case STUBRT_INLINE_BYTE:
        for (uint32_t i = 0; i < n; i++) {
            if (end - p < 4) {
                rc = STUBRT_E_SPACE;
                break;
            }
            stubrt_store_byte(p, ld32(v + 4 * (size_t)i), order);
            p += 4;
        }
        m->c.p = p;
        break;
    case STUBRT_INLINE_ITEM:
        for (uint32_t i = 0; i < n; i++) {
            if (end - p < 4) {
                rc = STUBRT_E_SPACE;
                break;
            }
            stubrt_store_item(p, ld32(v + 4 * (size_t)i), order);
            p += 4;
        }
        m->c.p = p;
        break;
    case STUBRT_PROC_BYTE:
        for (uint32_t i = 0; i < n; i++)
            if ((rc = stubrt_put_int_byte(&m->c, ld32(v + 4 * (size_t)i))) != STUBRT_OK)
                break;
        break;
    case STUBRT_PROC_ITEM:
        for (uint32_t i = 0; i < n; i++)
            if ((rc = stubrt_put_int_item(&m->c, ld32(v + 4 * (size_t)i))) != STUBRT_OK)
                break;
        break;
    default:
        if ((size_t)(end - p) < 4 * (size_t)n) {
            rc = STUBRT_E_SPACE;
            break;
        }
        stubrt_bcopy(p, v, 4 * (size_t)n);
        m->c.p = p + 4 * (size_t)n;
        break;
    }
    return rc;
}

static int put_str(struct mctx *m, const uint8_t *v, uint32_t max)
{
    const uint32_t len = ld32(v);
    const char *s = (const char *)v + 4;
    uint8_t *p, *end;
    int rc;

    if (len > max)
        return STUBRT_E_LENGTH;
    switch (m->variant) {
    case STUBRT_PROC_BYTE: return stubrt_put_str_byte(&m->c, s, len, max);
    case STUBRT_PROC_ITEM: return stubrt_put_str_item(&m->c, s, len, max);
    case STUBRT_BLOCK:
        if ((size_t)(m->c.end - m->c.p) < 4 + (size_t)len)
            return STUBRT_E_SPACE;
        stubrt_store_item(m->c.p, len, m->c.order);
        stubrt_bcopy(m->c.p + 4, s, len);
        m->c.p += 4 + (size_t)len;
        return STUBRT_OK;
    default:
        if ((rc = put_int(m, len)) != STUBRT_OK)
            return rc;
        p = m->c.p;
        end = m->c.end;
        for (uint32_t i = 0; i < len; i++) {
            if (p == end)
                return STUBRT_E_SPACE;
            *p++ = (uint8_t)s[i];
        }
        m->c.p = p;
        return STUBRT_OK;
    }
}

static int put(struct mctx *m, uint32_t i, const uint8_t *v)
{
    const struct interp_node *n = &m->nodes[i];
    uint32_t off = 0, k;
    int rc = STUBRT_OK;

    switch (n->kind) {
    case INTERP_INT: return put_int(m, ld32(v));
    case INTERP_STR: return put_str(m, v, n->count);
    case INTERP_ARR:
        if ((rc = put_int(m, n->count)) != STUBRT_OK)
            return rc;
        if (m->nodes[i + 1].kind == INTERP_INT)
            return put_int_array(m, v, n->count);
        /* Anything else is interpreted again for every element: the
		 * interpreter does not know the element is the same each time. */
        for (uint32_t e = 0; e < n->count && rc == STUBRT_OK; e++)
            rc = put(m, i + 1, v + (size_t)e * m->nodes[i + 1].size);
        return rc;
    default:
        k = i + 1;
        for (uint32_t f = 0; f < n->count && rc == STUBRT_OK; f++) {
            const struct interp_node *fn = &m->nodes[k];
            off = round_up(off, fn->align);
            rc = put(m, k, v + off);
            off += fn->size;
            k += fn->skip;
        }
        return rc;
    }
}

int interp_marshal(const struct interp_desc *d, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len,
                   int order)
{
    struct mctx m;
    int rc;

    if (!d || !value || !buf || !len || variant < 0 || variant >= STUBRT_NVARIANTS) {
        rc = STUBRT_E_ARG;
        goto out;
    }
    if (!stubrt_valid_order(order) || (variant == STUBRT_BLOCK && order != STUBRT_NATIVE)) {
        rc = STUBRT_E_ORDER;
        goto out;
    }
    m.c.p = buf;
    m.c.end = buf + cap;
    m.c.order = order;
    m.variant = variant;
    m.nodes = d->nodes;
    if ((rc = put(&m, 0, value)) != STUBRT_OK)
        goto out;
    *len = (size_t)(m.c.p - buf);
out:
    return rc;
}

/* ================================================================ unmarshal */

/* Every count and length read from the message is checked before it is used:
 * counts must equal the declared size, lengths be at most the declared
 * maximum, and no read goes past the end of the message. */
struct uctx {
    struct stubrt_rcursor c;
    int variant;
    const struct interp_node *nodes;
};

static int get_int(struct uctx *u, uint32_t *v)
{
    switch (u->variant) {
    case STUBRT_INLINE_BYTE:
        if (u->c.end - u->c.p < 4)
            return STUBRT_E_SHORT;
        *v = stubrt_load_byte(u->c.p, u->c.order);
        u->c.p += 4;
        return STUBRT_OK;
    case STUBRT_INLINE_ITEM:
    case STUBRT_BLOCK:
        if (u->c.end - u->c.p < 4)
            return STUBRT_E_SHORT;
        *v = stubrt_load_item(u->c.p, u->c.order);
        u->c.p += 4;
        return STUBRT_OK;
    case STUBRT_PROC_BYTE: return stubrt_get_int_byte(&u->c, v);
    default: return stubrt_get_int_item(&u->c, v);
    }
}

static int get_int_array(struct uctx *u, uint8_t *v, uint32_t n)
{
    const uint8_t *p = u->c.p, *const end = u->c.end;
    const int order = u->c.order;
    uint32_t x;
    int rc = STUBRT_OK;

    switch (u->variant) {
    case STUBRT_INLINE_BYTE:
        for (uint32_t i = 0; i < n; i++) {
            if (end - p < 4) {
                rc = STUBRT_E_SHORT;
                break;
            }
            st32(v + 4 * (size_t)i, stubrt_load_byte(p, order));
            p += 4;
        }
        u->c.p = p;
        break;
    case STUBRT_INLINE_ITEM:
        for (uint32_t i = 0; i < n; i++) {
            if (end - p < 4) {
                rc = STUBRT_E_SHORT;
                break;
            }
            st32(v + 4 * (size_t)i, stubrt_load_item(p, order));
            p += 4;
        }
        u->c.p = p;
        break;
    case STUBRT_PROC_BYTE:
        for (uint32_t i = 0; i < n && rc == STUBRT_OK; i++)
            if ((rc = stubrt_get_int_byte(&u->c, &x)) == STUBRT_OK)
                st32(v + 4 * (size_t)i, x);
        break;
    case STUBRT_PROC_ITEM:
        for (uint32_t i = 0; i < n && rc == STUBRT_OK; i++)
            if ((rc = stubrt_get_int_item(&u->c, &x)) == STUBRT_OK)
                st32(v + 4 * (size_t)i, x);
        break;
    default:
        if ((size_t)(end - p) < 4 * (size_t)n) {
            rc = STUBRT_E_SHORT;
            break;
        }
        stubrt_bcopy(v, p, 4 * (size_t)n);
        u->c.p = p + 4 * (size_t)n;
        break;
    }
    return rc;
}

static int get_str(struct uctx *u, uint8_t *v, uint32_t max)
{
    char *s = (char *)v + 4;
    const uint8_t *p, *end;
    uint32_t len;
    int rc;

    switch (u->variant) {
    case STUBRT_PROC_BYTE:
        if ((rc = stubrt_get_str_byte(&u->c, s, &len, max)) == STUBRT_OK)
            st32(v, len);
        return rc;
    case STUBRT_PROC_ITEM:
        if ((rc = stubrt_get_str_item(&u->c, s, &len, max)) == STUBRT_OK)
            st32(v, len);
        return rc;
    case STUBRT_BLOCK:
        if ((rc = get_int(u, &len)) != STUBRT_OK)
            return rc;
        if (len > max)
            return STUBRT_E_LENGTH;
        if ((size_t)(u->c.end - u->c.p) < len)
            return STUBRT_E_SHORT;
        stubrt_bcopy(s, u->c.p, len);
        u->c.p += len;
        st32(v, len);
        return STUBRT_OK;
    default:
        if ((rc = get_int(u, &len)) != STUBRT_OK)
            return rc;
        if (len > max)
            return STUBRT_E_LENGTH;
        p = u->c.p;
        end = u->c.end;
        for (uint32_t i = 0; i < len; i++) {
            if (p == end)
                return STUBRT_E_SHORT;
            s[i] = (char)*p++;
        }
        u->c.p = p;
        st32(v, len);
        return STUBRT_OK;
    }
}

static int get(struct uctx *u, uint32_t i, uint8_t *v)
{
    const struct interp_node *n = &u->nodes[i];
    uint32_t off = 0, k, x;
    int rc = STUBRT_OK;

    switch (n->kind) {
    case INTERP_INT:
        if ((rc = get_int(u, &x)) == STUBRT_OK)
            st32(v, x);
        return rc;
    case INTERP_STR: return get_str(u, v, n->count);
    case INTERP_ARR:
        if ((rc = get_int(u, &x)) != STUBRT_OK)
            return rc;
        if (x != n->count)
            return STUBRT_E_COUNT;
        if (u->nodes[i + 1].kind == INTERP_INT)
            return get_int_array(u, v, n->count);
        for (uint32_t e = 0; e < n->count && rc == STUBRT_OK; e++)
            rc = get(u, i + 1, v + (size_t)e * u->nodes[i + 1].size);
        return rc;
    default:
        k = i + 1;
        for (uint32_t f = 0; f < n->count && rc == STUBRT_OK; f++) {
            const struct interp_node *fn = &u->nodes[k];
            off = round_up(off, fn->align);
            rc = get(u, k, v + off);
            off += fn->size;
            k += fn->skip;
        }
        return rc;
    }
}

int interp_unmarshal(const struct interp_desc *d, int variant, void *value, size_t value_size, const uint8_t *buf,
                     size_t len, size_t *used, int order)
{
    struct uctx u;
    int rc;

    if (!d || !value || !buf || value_size != d->size || variant < 0 || variant >= STUBRT_NVARIANTS) {
        rc = STUBRT_E_ARG;
        goto out;
    }
    if (!stubrt_valid_order(order) || (variant == STUBRT_BLOCK && order != STUBRT_NATIVE)) {
        rc = STUBRT_E_ORDER;
        goto out;
    }
    u.c.p = buf;
    u.c.end = buf + len;
    u.c.order = order;
    u.variant = variant;
    u.nodes = d->nodes;
    if ((rc = get(&u, 0, value)) != STUBRT_OK)
        goto out;
    if (used)
        *used = (size_t)(u.c.p - buf);
    else if (u.c.p != u.c.end)
        rc = STUBRT_E_TRAILING;
out:
    return rc;
}

/* ================================================================ test values */

static uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void fill(const struct interp_node *nodes, uint32_t i, uint8_t *v, uint64_t *seed, int full)
{
    const struct interp_node *n = &nodes[i];
    uint32_t off = 0, len;

    switch (n->kind) {
    case INTERP_INT: st32(v, (uint32_t)xorshift(seed)); break;
    case INTERP_STR:
        /* Mostly full strings, sometimes empty or short, to reach the edges. */
        switch (full ? 1 : xorshift(seed) % 4) {
        case 0: len = 0; break;
        case 1: len = n->count; break;
        default: len = (uint32_t)(xorshift(seed) % ((uint64_t)n->count + 1)); break;
        }
        st32(v, len);
        for (uint32_t c = 0; c < len; c++)
            v[4 + c] = (uint8_t)xorshift(seed);
        break;
    case INTERP_ARR:
        for (uint32_t e = 0; e < n->count; e++)
            fill(nodes, i + 1, v + (size_t)e * nodes[i + 1].size, seed, full);
        break;
    default:
        for (uint32_t f = 0, k = i + 1; f < n->count; f++, k += nodes[k].skip) {
            off = round_up(off, nodes[k].align);
            fill(nodes, k, v + off, seed, full);
            off += nodes[k].size;
        }
        break;
    }
}

void interp_fill_random(const struct interp_desc *d, void *value, uint64_t *seed, int full_strings)
{
    if (d && value && seed)
        fill(d->nodes, 0, value, seed, full_strings);
}
