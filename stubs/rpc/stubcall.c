#include "stubcall.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "procs.h"
#include "stubreg.h"
#include "stubrt.h"
#include "util.h"
#include "wire.h"

#define STUBCALL_PROC_BASE PROCS_PLUGIN_BASE

static struct interp_desc *stubcall_desc[PROCS_PLUGIN_MAX];
static pthread_once_t stubcall_once = PTHREAD_ONCE_INIT;
static int stubcall_init_status;

/* Parse every descriptor once per process: the interpreter then works from
 * the parsed tree, as a runtime-interpreted stub would. */
static void stubcall_init(void)
{
    char err[256];
    for (size_t i = 0; i < stubreg_nprocs && i < PROCS_PLUGIN_MAX; i++)
        if (interp_parse(stubreg_procs[i]->desc, &stubcall_desc[i], err, sizeof err) != STUBRT_OK)
            stubcall_init_status =
                util_fail(UTIL_EINVAL, "interp_parse(%s.%s): %s", stubreg_procs[i]->iface, stubreg_procs[i]->name, err);
}

static int stubcall_count(void) { return (int)(stubreg_nprocs < PROCS_PLUGIN_MAX ? stubreg_nprocs : PROCS_PLUGIN_MAX); }

static const struct stubrt_proc *entry(int proc)
{
    return proc >= STUBCALL_PROC_BASE && proc < STUBCALL_PROC_BASE + stubcall_count()
               ? stubreg_procs[proc - STUBCALL_PROC_BASE]
               : NULL;
}

static int stubcall_by_name(const char *name)
{
    for (int i = 0; i < stubcall_count(); i++) {
        char full[128];
        snprintf(full, sizeof full, "%s.%s", stubreg_procs[i]->iface, stubreg_procs[i]->name);
        if (!strcmp(full, name))
            return STUBCALL_PROC_BASE + i;
    }
    return -1;
}

static const char *stubcall_name(int proc)
{
    static __thread char name[128];
    const struct stubrt_proc *p = entry(proc);
    if (!p)
        return "unknown";
    snprintf(name, sizeof name, "%s.%s", p->iface, p->name);
    return name;
}

static size_t stubcall_args_size(int proc) { return entry(proc) ? entry(proc)->args_size : 0; }
static size_t stubcall_wire_max(int proc) { return entry(proc) ? entry(proc)->wire_max : 0; }

static int stubcall_parse_variant(const char *s, int *variant)
{
    int interp = !strncmp(s, "interp-", 7);
    int v = stubrt_variant_parse(interp ? s + 7 : s);
    if (v < 0)
        return util_fail(UTIL_EINVAL,
                         "'%s' is not a stub variant (inline-byte, inline-item, proc-byte, proc-item, "
                         "block, or interp- before any of them)",
                         s);
    *variant = v | (interp ? STUBCALL_INTERP : 0);
    return UTIL_OK;
}

static const char *stubcall_variant_name(int variant)
{
    static __thread char name[64];
    snprintf(name, sizeof name, "%s%s", variant & STUBCALL_INTERP ? "interp-" : "",
             stubrt_variant_name(variant & ~STUBCALL_INTERP));
    return name;
}

static int order_of(uint8_t drep) { return drep == WIRE_DREP_BIG ? STUBRT_BIG : STUBRT_LITTLE; }

static int check(int proc, int variant, int st, const char *what)
{
    if (st == STUBRT_OK)
        return UTIL_OK;
    return util_fail(st == STUBRT_E_ORDER ? UTIL_EINVAL : UTIL_EPROTO, "%s %s with %s stubs: %s%s", what,
                     stubcall_name(proc), stubcall_variant_name(variant), stubrt_strerror(st),
                     st == STUBRT_E_ORDER ? " (block copy cannot swap: use --wire native)" : "");
}

/* The procedure's table entry, once the descriptors are parsed. */
static int resolve(int proc, int variant, const struct stubrt_proc **p)
{
    pthread_once(&stubcall_once, stubcall_init);
    *p = entry(proc);
    if (!*p || (variant & ~STUBCALL_INTERP) >= STUBRT_NVARIANTS)
        return util_fail(UTIL_EINVAL, "no stub procedure %d or variant %d", proc, variant);
    return stubcall_init_status;
}

static int stubcall_marshal(int proc, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len,
                            uint8_t drep)
{
    const struct stubrt_proc *p = NULL;
    int v = variant & ~STUBCALL_INTERP, st = resolve(proc, variant, &p);
    if (st)
        return st;
    if (variant & STUBCALL_INTERP)
        st = interp_marshal(stubcall_desc[proc - STUBCALL_PROC_BASE], v, value, buf, cap, len, order_of(drep));
    else
        st = p->marshal[v](value, buf, cap, len, order_of(drep));
    return check(proc, variant, st, "marshal");
}

static int stubcall_unmarshal(int proc, int variant, void *value, const uint8_t *buf, size_t len, uint8_t drep)
{
    const struct stubrt_proc *p = NULL;
    int v = variant & ~STUBCALL_INTERP, st = resolve(proc, variant, &p);
    if (st)
        return st;
    if (variant & STUBCALL_INTERP)
        st = interp_unmarshal(stubcall_desc[proc - STUBCALL_PROC_BASE], v, value, p->args_size, buf, len, NULL,
                              order_of(drep));
    else
        st = p->unmarshal[v](value, buf, len, NULL, order_of(drep));
    return check(proc, variant, st, "unmarshal");
}

static int stubcall_checksum(int proc, const void *value, uint8_t *scratch, size_t cap, uint32_t *sum)
{
    size_t len = 0;
    uint32_t h = 2166136261u;
    int rc = stubcall_marshal(proc, STUBRT_INLINE_ITEM, value, scratch, cap, &len, WIRE_DREP_BIG);
    if (rc)
        return rc;
    for (size_t i = 0; i < len; i++)
        h = (h ^ scratch[i]) * 16777619u;
    *sum = h;
    return UTIL_OK;
}

static int stubcall_check_variant(int variant, uint8_t drep)
{
    if ((variant & ~STUBCALL_INTERP) == STUBRT_BLOCK && drep != wire_native_drep())
        return util_fail(UTIL_EINVAL, "--stub %s cannot swap bytes: use --wire native with block copy",
                         stubcall_variant_name(variant));
    return UTIL_OK;
}

/* A random value (full-length strings, the paper's workload), its checksum and its wire length. */
static int stubcall_sample(int proc, void *value, uint64_t seed, uint32_t *sum, uint32_t *wire_len)
{
    size_t cap = stubcall_wire_max(proc), len = 0;
    uint8_t *tmp;
    int rc;

    pthread_once(&stubcall_once, stubcall_init);
    if (!entry(proc))
        return util_fail(UTIL_EINVAL, "no stub procedure %d", proc);
    if (stubcall_init_status)
        return stubcall_init_status;
    tmp = malloc(cap);
    if (!tmp)
        return util_fail(UTIL_ENOMEM, "malloc(%zu bytes for %s)", cap, stubcall_name(proc));
    memset(value, 0, entry(proc)->args_size);
    interp_fill_random(stubcall_desc[proc - STUBCALL_PROC_BASE], value, &seed, 1);
    rc = stubcall_checksum(proc, value, tmp, cap, sum);
    if (!rc)
        rc = stubcall_marshal(proc, STUBRT_INLINE_ITEM, value, tmp, cap, &len, WIRE_DREP_BIG);
    *wire_len = (uint32_t)len;
    free(tmp);
    return rc;
}

const struct procs_table stubcall_procs = {
    .count = stubcall_count,
    .name = stubcall_name,
    .by_name = stubcall_by_name,
    .value_size = stubcall_args_size,
    .wire_max = stubcall_wire_max,
    .parse_variant = stubcall_parse_variant,
    .check_variant = stubcall_check_variant,
    .marshal = stubcall_marshal,
    .unmarshal = stubcall_unmarshal,
    .checksum = stubcall_checksum,
    .sample = stubcall_sample,
};
