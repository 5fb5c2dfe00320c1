/*
 * stubtest: round trips and hostile input for every generated procedure,
 * through every variant, compiled and interpreted, in both byte orders.
 *
 *   stubtest [-n VALUES] [-s SEED]
 *
 * For each procedure and random value: every variant must marshal to the
 * same bytes as every other (the wire format does not depend on the stub
 * design), every variant must unmarshal those bytes back to the value, and
 * truncated, padded or corrupted messages must be refused with the right
 * status. Exit status 0 when all checks pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "stubreg.h"
#include "stubrt.h"

static long failures;
static long checks;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        checks++;                                                              \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            if (failures <= 30) {                                              \
                fprintf(stderr, "stubtest: FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__);                                  \
                fputc('\n', stderr);                                           \
            }                                                                  \
        }                                                                      \
    } while (0)

static const int orders[2] = { STUBRT_BIG, STUBRT_LITTLE };

/* Marshals with stub kind (0 compiled, 1 interpreted) and variant. */
static int do_marshal(const struct stubrt_proc *pr, const struct interp_desc *d, int interp, int v, const void *val,
                      uint8_t *buf, size_t cap, size_t *len, int order)
{
    if (interp)
        return interp_marshal(d, v, val, buf, cap, len, order);
    return pr->marshal[v](val, buf, cap, len, order);
}

static int do_unmarshal(const struct stubrt_proc *pr, const struct interp_desc *d, int interp, int v, void *val,
                        const uint8_t *buf, size_t len, size_t *used, int order)
{
    if (interp)
        return interp_unmarshal(d, v, val, pr->args_size, buf, len, used, order);
    return pr->unmarshal[v](val, buf, len, used, order);
}

/* The offsets of every count and length in a message, found by walking
 * the descriptor over the message, so that the test can corrupt them. */
static size_t find_counts(const struct interp_node *nodes, uint32_t i, const uint8_t *msg, size_t pos, int order,
                          size_t *offs, uint32_t *nodeix, size_t *nk, size_t maxk)
{
    const struct interp_node *n = &nodes[i];
    uint32_t len;

    switch (n->kind) {
    case INTERP_INT: return pos + 4;
    case INTERP_STR:
        if (*nk < maxk) {
            offs[*nk] = pos;
            nodeix[(*nk)++] = i;
        }
        len = stubrt_load_byte(msg + pos, order);
        return pos + 4 + len;
    case INTERP_ARR:
        if (*nk < maxk) {
            offs[*nk] = pos;
            nodeix[(*nk)++] = i;
        }
        pos += 4;
        for (uint32_t e = 0; e < n->count; e++)
            pos = find_counts(nodes, i + 1, msg, pos, order, offs, nodeix, nk, maxk);
        return pos;
    default:
        for (uint32_t f = 0, k = i + 1; f < n->count; f++, k += nodes[k].skip)
            pos = find_counts(nodes, k, msg, pos, order, offs, nodeix, nk, maxk);
        return pos;
    }
}

static void test_proc(const struct stubrt_proc *pr, int nvalues, uint64_t seed)
{
    struct interp_desc *d = NULL;
    uint8_t *val = NULL, *back = NULL, *ref = NULL, *buf = NULL;
    size_t cap, reflen, len, used, offs[64], nk;
    uint32_t nodeix[64];
    char err[200];
    int rc;

    if ((rc = interp_parse(pr->desc, &d, err, sizeof(err))) != STUBRT_OK) {
        CHECK(0, "%s_%s: interp_parse(\"%s\"): %s", pr->iface, pr->name, pr->desc, err);
        goto out;
    }
    CHECK(d->size == pr->args_size, "%s_%s: interpreter size %zu, compiled struct %zu", pr->iface, pr->name, d->size,
          pr->args_size);
    CHECK(d->wire_max == pr->wire_max, "%s_%s: interpreter wire max %zu, compiler %zu", pr->iface, pr->name,
          d->wire_max, pr->wire_max);
    if (d->size != pr->args_size)
        goto out;
    cap = pr->wire_max + 16;
    val = calloc(1, pr->args_size);
    back = calloc(1, pr->args_size);
    ref = malloc(cap);
    buf = malloc(cap);
    if (!val || !back || !ref || !buf) {
        fprintf(stderr, "stubtest: calloc/malloc failed\n");
        exit(1);
    }
    for (int n = 0; n < nvalues; n++) {
        memset(val, 0, pr->args_size);
        interp_fill_random(d, val, &seed, n == 0);
        for (int o = 0; o < 2; o++) {
            const int order = orders[o];
            /* The reference: compiled, inline, byte copy. */
            rc = pr->marshal[STUBRT_INLINE_BYTE](val, ref, cap, &reflen, order);
            CHECK(rc == STUBRT_OK, "%s_%s: reference marshal: %s", pr->iface, pr->name, stubrt_strerror(rc));
            if (rc != STUBRT_OK)
                continue;
            for (int ip = 0; ip < 2; ip++) {
                for (int v = 0; v < STUBRT_NVARIANTS; v++) {
                    const char *kind = ip ? "interpreted" : "compiled";
                    const char *vn = stubrt_variant_name(v);
                    const char oc = (char)order;

                    if (v == STUBRT_BLOCK && order != STUBRT_NATIVE) {
                        rc = do_marshal(pr, d, ip, v, val, buf, cap, &len, order);
                        CHECK(rc == STUBRT_E_ORDER, "%s_%s %s %s %c: block copy with swapping gave %s", pr->iface,
                              pr->name, kind, vn, oc, stubrt_strerror(rc));
                        rc = do_unmarshal(pr, d, ip, v, back, ref, reflen, NULL, order);
                        CHECK(rc == STUBRT_E_ORDER, "%s_%s %s %s %c: block unmarshal with swapping gave %s", pr->iface,
                              pr->name, kind, vn, oc, stubrt_strerror(rc));
                        continue;
                    }
                    /* Same bytes as the reference. */
                    memset(buf, 0xa5, cap);
                    rc = do_marshal(pr, d, ip, v, val, buf, cap, &len, order);
                    CHECK(rc == STUBRT_OK && len == reflen && memcmp(buf, ref, len) == 0,
                          "%s_%s %s %s %c: marshal differs from the reference (%s, %zu vs %zu bytes)", pr->iface,
                          pr->name, kind, vn, oc, stubrt_strerror(rc), len, reflen);
                    /* Round trip. */
                    memset(back, 0, pr->args_size);
                    rc = do_unmarshal(pr, d, ip, v, back, ref, reflen, NULL, order);
                    CHECK(rc == STUBRT_OK && memcmp(back, val, pr->args_size) == 0,
                          "%s_%s %s %s %c: unmarshal(marshal(x)) != x (%s)", pr->iface, pr->name, kind, vn, oc,
                          stubrt_strerror(rc));
                    if (n > 1)
                        continue; /* the hostile cases need only a few values */
                    /* Too little room to marshal. */
                    for (size_t c = 0; c < reflen; c += (reflen > 64 ? reflen / 17 + 1 : 1)) {
                        rc = do_marshal(pr, d, ip, v, val, buf, c, &len, order);
                        CHECK(rc == STUBRT_E_SPACE, "%s_%s %s %s %c: marshal into %zu of %zu bytes gave %s", pr->iface,
                              pr->name, kind, vn, oc, c, reflen, stubrt_strerror(rc));
                    }
                    /* Truncated messages, into an exactly sized heap copy so that a
					 * sanitizer sees any read past the end. */
                    for (size_t c = 0; c < reflen; c += (reflen > 64 ? reflen / 13 + 1 : 1)) {
                        uint8_t *t = malloc(c ? c : 1);
                        if (!t) {
                            fprintf(stderr, "stubtest: malloc failed\n");
                            exit(1);
                        }
                        memcpy(t, ref, c);
                        rc = do_unmarshal(pr, d, ip, v, back, t, c, NULL, order);
                        CHECK(rc == STUBRT_E_SHORT, "%s_%s %s %s %c: unmarshal of %zu of %zu bytes gave %s", pr->iface,
                              pr->name, kind, vn, oc, c, reflen, stubrt_strerror(rc));
                        free(t);
                    }
                    /* A byte too many: refused without used, reported with it. */
                    memcpy(buf, ref, reflen);
                    buf[reflen] = 0;
                    rc = do_unmarshal(pr, d, ip, v, back, buf, reflen + 1, NULL, order);
                    CHECK(rc == STUBRT_E_TRAILING, "%s_%s %s %s %c: trailing byte gave %s", pr->iface, pr->name, kind,
                          vn, oc, stubrt_strerror(rc));
                    rc = do_unmarshal(pr, d, ip, v, back, buf, reflen + 1, &used, order);
                    CHECK(rc == STUBRT_OK && used == reflen, "%s_%s %s %s %c: used %zu of %zu (%s)", pr->iface,
                          pr->name, kind, vn, oc, used, reflen, stubrt_strerror(rc));
                    /* Corrupt every count and length. */
                    nk = 0;
                    find_counts(d->nodes, 0, ref, 0, order, offs, nodeix, &nk, 64);
                    for (size_t k = 0; k < nk; k++) {
                        uint32_t x = stubrt_load_byte(ref + offs[k], order);
                        const uint32_t bad[3] = { x + 1, x - 1, 0xffffffffu };
                        const struct interp_node *cn = &d->nodes[nodeix[k]];
                        for (int b = 0; b < 3; b++) {
                            memcpy(buf, ref, reflen);
                            stubrt_store_byte(buf + offs[k], bad[b], order);
                            rc = do_unmarshal(pr, d, ip, v, back, buf, reflen, NULL, order);
                            if (cn->kind == INTERP_ARR)
                                CHECK(rc == STUBRT_E_COUNT, "%s_%s %s %s %c: array count %u gave %s", pr->iface,
                                      pr->name, kind, vn, oc, bad[b], stubrt_strerror(rc));
                            else if (bad[b] > cn->count)
                                CHECK(rc == STUBRT_E_LENGTH, "%s_%s %s %s %c: string length %u of max %u gave %s",
                                      pr->iface, pr->name, kind, vn, oc, bad[b], cn->count, stubrt_strerror(rc));
                            else /* well formed, but the rest of the message no longer fits */
                                CHECK(rc != STUBRT_OK, "%s_%s %s %s %c: string length %u (was %u) accepted", pr->iface,
                                      pr->name, kind, vn, oc, bad[b], x);
                        }
                    }
                }
            }
        }
    }
out:
    interp_free(d);
    free(val);
    free(back);
    free(ref);
    free(buf);
}

/* Descriptors the interpreter must refuse, with the column it must name. */
static void test_bad_descriptors(void)
{
    static const struct {
        const char *text;
        int col;
    } bad[] = {
        { "", 1 },
        { "I", 1 },
        { "()", 2 },
        { "(X)", 2 },
        { "(A[0] I)", 4 },
        { "(A[256 I)", 8 },
        { "(A[256])", 8 },
        { "(S<>)", 4 },
        { "(S<9999999999>)", 4 },
        { "(I", 3 },
        { "(I))", 4 },
        { "((I) ())", 7 },
        { "(A[1048576] A[1048576] I)", 25 },
        { "((((((((((((((((((((((((((((((((((I))))))))))))))))))))))))))))))))))", 34 },
    };
    struct interp_desc *d = NULL;
    char err[200], want[32];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = interp_parse(bad[i].text, &d, err, sizeof(err));
        snprintf(want, sizeof(want), "column %d:", bad[i].col);
        CHECK(rc == STUBRT_E_DESC && d == NULL && strncmp(err, want, strlen(want)) == 0,
              "interp_parse(\"%s\"): status %d, message \"%s\", wanted \"%s ...\"", bad[i].text, rc, err, want);
        interp_free(d);
        d = NULL;
    }
}

/* Writes one fuzz seed per procedure, variant and order: the input layout of
 * fuzz_interp.c around a well-formed message. */
static int write_seeds(const char *dir)
{
    uint64_t seed = 7;
    int rc = 1;

    for (size_t i = 0; i < stubreg_nprocs && i < 255; i++) {
        const struct stubrt_proc *pr = stubreg_procs[i];
        struct interp_desc *d = NULL;
        uint8_t *val = NULL, *msg = NULL;
        char err[200], path[4096];
        size_t len;
        FILE *f;

        if (interp_parse(pr->desc, &d, err, sizeof(err)) != STUBRT_OK) {
            fprintf(stderr, "stubtest: interp_parse: %s\n", err);
            goto out;
        }
        val = calloc(1, d->size);
        msg = malloc(pr->wire_max + 2);
        if (!val || !msg) {
            fprintf(stderr, "stubtest: calloc/malloc failed\n");
            free(val);
            free(msg);
            interp_free(d);
            goto out;
        }
        interp_fill_random(d, val, &seed, 0);
        for (int v = 0; v < STUBRT_NVARIANTS; v++) {
            const int order = v == STUBRT_BLOCK ? STUBRT_NATIVE : STUBRT_BIG;
            msg[0] = (uint8_t)i;
            msg[1] = (uint8_t)(v | (order == STUBRT_BIG ? 8 : 0));
            if (interp_marshal(d, v, val, msg + 2, pr->wire_max, &len, order) != STUBRT_OK)
                continue;
            snprintf(path, sizeof(path), "%s/seed-%zu-%d", dir, i, v);
            if (!(f = fopen(path, "wb"))) {
                perror(path);
                break;
            }
            fwrite(msg, 1, len + 2, f);
            fclose(f);
        }
        free(val);
        free(msg);
        interp_free(d);
    }
    rc = 0;
out:
    return rc;
}

int main(int argc, char **argv)
{
    int nvalues = 20;
    uint64_t seed = 0x5eed;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            nvalues = atoi(argv[++i]);
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc)
            return write_seeds(argv[++i]);
        else {
            fprintf(stderr, "usage: stubtest [-n VALUES] [-s SEED] | stubtest -w SEED_DIR\n");
            return 2;
        }
    }
    test_bad_descriptors();
    for (size_t i = 0; i < stubreg_nprocs; i++)
        test_proc(stubreg_procs[i], nvalues, seed + i);
    printf(
        "stubtest: %zu procedures, %d values each, both byte orders, %d variants x 2 stub kinds: "
        "%ld checks, %ld failures\n",
        stubreg_nprocs, nvalues, STUBRT_NVARIANTS, checks, failures);
    return failures ? 1 : 0;
}
