#include "procs.h"

#include <string.h>

#include "client.h"
#include "trace.h"
#include "util.h"
#include "wire.h"

static const char *const proc_names[PROC_COUNT] = {
    "null", "incr", "maxarg", "maxresult", "add", "sum", "concat", "echo", "courier", "courier_oneway", "fixedarg",
};

static const struct procs_table *plugin;
static int plugin_count;

int procs_register(const struct procs_table *t)
{
    int n;
    if (plugin)
        return util_fail(UTIL_EINVAL, "procs_register: a table is plugged in already");
    n = t ? t->count() : -1;
    if (n < 0 || n > PROCS_PLUGIN_MAX)
        return util_fail(UTIL_EINVAL, "procs_register: a table of %d procedures (0 to %d)", n, PROCS_PLUGIN_MAX);
    plugin = t;
    plugin_count = n;
    return UTIL_OK;
}

const struct procs_table *procs_plugin(void) { return plugin; }

int proc_is_plugin(int proc) { return plugin && proc >= PROCS_PLUGIN_BASE && proc < PROCS_PLUGIN_BASE + plugin_count; }

int proc_parse_variant(const char *s, int *variant)
{
    if (!plugin)
        return util_fail(UTIL_EINVAL, "'%s': no plugged-in procedures take a variant in this program", s);
    return plugin->parse_variant(s, variant);
}

const char *proc_name(int proc)
{
    if (proc_is_plugin(proc))
        return plugin->name(proc);
    return proc >= 0 && proc < PROC_COUNT ? proc_names[proc] : "unknown";
}

int proc_valid(int proc) { return (proc >= 0 && proc < PROC_COUNT) || proc_is_plugin(proc); }

int proc_by_name(const char *name)
{
    for (int i = 0; i < PROC_COUNT; i++)
        if (!strcmp(name, proc_names[i]))
            return i;
    return plugin ? plugin->by_name(name) : -1;
}

int proc_is_oneway(int proc) { return proc == PROC_COURIER_ONEWAY; }

uint32_t proc_max_size(int proc, uint32_t max_msg)
{
    switch (proc) {
    case PROC_NULL:
    case PROC_INCR:
    case PROC_ADD: return 0;
    case PROC_SUM:
    case PROC_CONCAT:
    case PROC_MAXARG:
    case PROC_MAXRESULT:
    case PROC_ECHO:
    case PROC_COURIER:
    case PROC_COURIER_ONEWAY:
    case PROC_FIXEDARG: break;
    default: return 0; /* a plugged-in procedure's argument is its value */
    }
    switch (proc) {
    case PROC_SUM: return (max_msg - 4) / 4;
    case PROC_CONCAT: return max_msg - 16;
    case PROC_FIXEDARG: return max_msg;
    default: return max_msg - 8;
    }
}

uint8_t proc_pattern_byte(uint32_t i) { return (uint8_t)(i * 131u + 7u); }

/* ------------------------------------------------------------------ client stub */

static void marshal_args(struct client *c, struct marshal_enc *e, int proc, const struct proc_args *a)
{
    if (proc >= PROC_COUNT) { /* plugged in (the caller checked proc_valid) */
        size_t len = 0, cap = plugin->wire_max(proc);
        uint8_t *dst = marshal_reserve(e, cap);
        if (!dst)
            return;
        e->status = plugin->marshal(proc, c->cfg.stub_variant, a->value, dst, cap, &len, e->drep);
        if (!e->status)
            marshal_commit(e, len);
        return;
    }
    switch (proc) {
    case PROC_NULL:
    case PROC_INCR: break;
    case PROC_MAXRESULT: marshal_put_u32(e, a->n); break;
    case PROC_ADD:
        marshal_put_i32(e, a->a);
        marshal_put_i32(e, a->b);
        break;
    case PROC_SUM: marshal_put_i32_array(e, a->ints, a->nints); break;
    case PROC_CONCAT:
        marshal_put_string(e, a->s1, a->len1);
        marshal_put_string(e, a->s2, a->len2);
        break;
    case PROC_FIXEDARG: marshal_put_fixed(e, a->data, a->len); break;
    default: marshal_put_opaque(e, a->data, a->len, 0); break;
    }
}

static int unmarshal_result(struct marshal_dec *d, int proc, struct proc_result *r, uint32_t max)
{
    memset(r, 0, sizeof *r);
    if (proc >= PROC_COUNT) { /* plugged in (the caller checked proc_valid) */
        marshal_get_u32(d, &r->checksum);
        marshal_get_u32(d, &r->len);
        return marshal_dec_end(d);
    }
    switch (proc) {
    case PROC_NULL:
    case PROC_MAXARG:
    case PROC_COURIER_ONEWAY:
    case PROC_FIXEDARG: break;
    case PROC_INCR: marshal_get_u64(d, &r->counter); break;
    case PROC_MAXRESULT:
    case PROC_CONCAT: marshal_get_opaque(d, &r->data, &r->len, max); break;
    case PROC_ADD:
    case PROC_COURIER: marshal_get_i32(d, &r->i); break;
    case PROC_SUM: marshal_get_i64(d, &r->sum); break;
    case PROC_ECHO:
        marshal_get_opaque(d, &r->data, &r->len, max);
        marshal_get_i32(d, &r->i);
        break;
    default: return util_fail(UTIL_EINVAL, "unknown procedure %d", proc);
    }
    return marshal_dec_end(d);
}

static uint32_t arg_bytes(int proc, const struct proc_args *a)
{
    switch (proc) {
    case PROC_SUM: return a->nints * 4;
    case PROC_CONCAT: return a->len1 + a->len2;
    case PROC_MAXARG:
    case PROC_ECHO:
    case PROC_COURIER:
    case PROC_COURIER_ONEWAY:
    case PROC_FIXEDARG: return a->len;
    default: return proc_is_plugin(proc) ? (uint32_t)plugin->wire_max(proc) : 0;
    }
}

int proc_call(struct client *c, int proc, const struct proc_args *a, struct proc_result *r)
{
    int rc;
    struct marshal_enc *enc;
    struct marshal_dec dec;
    uint64_t call_id = client_next_call_id(c);

    RPCS_TRACE(c1_begin, call_id, (uint16_t)proc, arg_bytes(proc, a));
    if (!proc_valid(proc))
        return util_fail(UTIL_EINVAL, "unknown procedure %d", proc);
    RPCS_TRACE(c1_end, call_id, (uint16_t)proc, arg_bytes(proc, a));

    rc = client_call_start(c, (uint16_t)proc, proc_is_oneway(proc), &enc);
    if (rc)
        goto out;
    RPCS_TRACE(c3_begin, call_id, arg_bytes(proc, a));
    marshal_args(c, enc, proc, a);
    RPCS_TRACE(c3_end, call_id, (uint32_t)enc->total);
    if (enc->status) {
        rc = enc->status;
        goto end;
    }
    rc = client_call_invoke(c, &dec);
    if (rc || proc_is_oneway(proc))
        goto end;
    RPCS_TRACE(c19_begin, call_id, (uint32_t)dec.len);
    rc = unmarshal_result(&dec, proc, r, c->cfg.max_msg);
    RPCS_TRACE(c19_end, call_id, (uint32_t)dec.len);
end:
    client_call_end(c);
    RPCS_TRACE(c21_begin, call_id);
out:
    RPCS_TRACE(c21_end, call_id);
    return rc;
}

/* ------------------------------------------------------------------ server skeleton */

int proc_serve(struct proc_server *srv, int proc, uint64_t call_id, struct marshal_dec *d, struct marshal_enc *e,
               int32_t *ints, uint32_t int_cap, uint8_t *bytes, uint32_t byte_cap)
{
    struct proc_args a = { 0 };
    struct proc_result r = { 0 };
    uint32_t max = (uint32_t)d->len;
    int rc = UTIL_OK;

    RPCS_TRACE(s5_unmarshal, call_id, (uint16_t)proc, (uint32_t)d->len);
    if (proc_is_plugin(proc)) {
        /* A plugged-in procedure: its variant unmarshals the value into byte_scratch,
         * S6 checksums it, S7 returns the checksum and the wire length. */
        uint32_t sum = 0;
        if (byte_cap < plugin->value_size(proc))
            rc = util_fail(UTIL_ENOMEM, "%s needs %zu bytes for its value", plugin->name(proc),
                           plugin->value_size(proc));
        else
            rc = plugin->unmarshal(proc, srv->stub_variant, bytes, d->p, d->len, d->drep);
        RPCS_TRACE(s5_end, call_id, (uint16_t)proc, (uint32_t)d->len);
        if (rc)
            return rc;
        RPCS_TRACE(s6_begin, call_id, (uint16_t)proc, (uint32_t)d->len);
        rc = plugin->checksum(proc, bytes, (uint8_t *)ints, (size_t)int_cap * 4, &sum);
        RPCS_TRACE(s6_end, call_id, (uint16_t)proc, 8);
        if (rc)
            return rc;
        RPCS_TRACE(s7_begin, call_id, 8);
        marshal_put_u32(e, sum);
        marshal_put_u32(e, (uint32_t)d->len);
        RPCS_TRACE(s7_end, call_id, (uint32_t)e->total);
        return e->status;
    }
    switch (proc) {
    case PROC_NULL:
    case PROC_INCR: break;
    case PROC_MAXRESULT: marshal_get_u32(d, &a.n); break;
    case PROC_ADD:
        marshal_get_i32(d, &a.a);
        marshal_get_i32(d, &a.b);
        break;
    case PROC_SUM:
        marshal_get_i32_array(d, ints, int_cap, &a.nints);
        a.ints = ints;
        break;
    case PROC_CONCAT:
        marshal_get_string(d, &a.s1, &a.len1, max);
        marshal_get_string(d, &a.s2, &a.len2, max);
        break;
    case PROC_FIXEDARG: marshal_get_rest(d, &a.data, &a.len); break;
    default: marshal_get_opaque(d, &a.data, &a.len, max); break;
    }
    rc = marshal_dec_end(d);
    if (proc == PROC_MAXRESULT && !rc && a.n > byte_cap)
        rc = util_fail(UTIL_EPROTO, "maxresult(%u) exceeds the reply limit %u", a.n, byte_cap);
    if (proc == PROC_CONCAT && !rc && (uint64_t)a.len1 + a.len2 > byte_cap)
        rc = util_fail(UTIL_EPROTO, "concat result of %u bytes exceeds the limit", a.len1 + a.len2);
    RPCS_TRACE(s5_end, call_id, (uint16_t)proc, (uint32_t)d->len);
    if (rc)
        return rc;

    RPCS_TRACE(s6_begin, call_id, (uint16_t)proc, (uint32_t)d->len);
    switch (proc) {
    case PROC_INCR: r.counter = __atomic_add_fetch(&srv->counter, 1, __ATOMIC_SEQ_CST); break;
    case PROC_MAXRESULT:
        for (uint32_t i = 0; i < a.n; i++)
            bytes[i] = proc_pattern_byte(i);
        r.data = bytes;
        r.len = a.n;
        break;
    case PROC_ADD: r.i = (int32_t)((uint32_t)a.a + (uint32_t)a.b); break;
    case PROC_SUM:
        for (uint32_t i = 0; i < a.nints; i++)
            r.sum += a.ints[i];
        break;
    case PROC_CONCAT:
        memcpy(bytes, a.s1, a.len1);
        memcpy(bytes + a.len1, a.s2, a.len2);
        r.data = bytes;
        r.len = a.len1 + a.len2;
        break;
    case PROC_ECHO:
        r.data = a.data;
        r.len = a.len;
        r.i = (int32_t)a.len;
        break;
    case PROC_COURIER: r.i = (int32_t)a.len; break;
    default: break;
    }
    RPCS_TRACE(s6_end, call_id, (uint16_t)proc, r.len);

    if (proc_is_oneway(proc))
        return UTIL_OK;
    RPCS_TRACE(s7_begin, call_id, r.len);
    switch (proc) {
    case PROC_INCR: marshal_put_u64(e, r.counter); break;
    case PROC_MAXRESULT:
    case PROC_CONCAT: marshal_put_opaque(e, r.data, r.len, 0); break;
    case PROC_ADD:
    case PROC_COURIER: marshal_put_i32(e, r.i); break;
    case PROC_SUM: marshal_put_i64(e, r.sum); break;
    case PROC_ECHO:
        marshal_put_opaque(e, r.data, r.len, 0);
        marshal_put_i32(e, r.i);
        break;
    default: break;
    }
    RPCS_TRACE(s7_end, call_id, (uint32_t)e->total);
    return e->status;
}
