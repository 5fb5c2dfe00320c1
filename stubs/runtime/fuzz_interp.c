/*
 * libFuzzer target for the interpreter's unmarshaller (and its descriptor
 * parser). Input layout:
 *   byte 0   which descriptor: < stubreg_nprocs picks a generated procedure;
 *            otherwise the descriptor text follows, up to a NUL byte
 *   byte 1   bits 0-2: variant (mod STUBRT_NVARIANTS); bit 3: byte order
 *   rest     the message
 * Checks beyond "no crash, no sanitizer report": an accepted message must
 * marshal back to exactly the bytes consumed (the wire format is canonical),
 * and for a generated procedure the compiled unmarshaller must agree with
 * the interpreter on the status and the value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "stubreg.h"
#include "stubrt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct stubrt_proc *pr = NULL;
    struct interp_desc *d = NULL;
    uint8_t *val = NULL, *val2 = NULL, *out = NULL;
    char *text = NULL, err[160];
    const uint8_t *msg, *nul;
    size_t msglen, used = 0, len = 0;
    int variant, order, rc, rc2;

    if (size < 2)
        goto done;
    variant = (data[1] & 7) % STUBRT_NVARIANTS;
    order = (data[1] & 8) ? STUBRT_BIG : STUBRT_LITTLE;
    if (variant == STUBRT_BLOCK)
        order = STUBRT_NATIVE;
    if (data[0] < stubreg_nprocs) {
        pr = stubreg_procs[data[0]];
        if (interp_parse(pr->desc, &d, err, sizeof(err)) != STUBRT_OK)
            abort();
        msg = data + 2;
        msglen = size - 2;
    } else {
        nul = memchr(data + 2, 0, size - 2);
        if (!nul)
            goto done;
        text = strndup((const char *)data + 2, (size_t)(nul - (data + 2)));
        if (!text || interp_parse(text, &d, err, sizeof(err)) != STUBRT_OK)
            goto done;
        msg = nul + 1;
        msglen = size - (size_t)(msg - data);
    }
    /* Keep each run small: a descriptor may legally describe 16 MiB. */
    if (d->size > (1u << 20))
        goto done;
    val = calloc(1, d->size);
    val2 = calloc(1, d->size);
    if (!val || !val2)
        goto done;
    rc = interp_unmarshal(d, variant, val, d->size, msg, msglen, &used, order);
    if (pr) {
        size_t used2 = 0;
        rc2 = pr->unmarshal[variant](val2, msg, msglen, &used2, order);
        if (rc2 != rc || (rc == STUBRT_OK && (used2 != used || memcmp(val, val2, d->size) != 0))) {
            fprintf(stderr, "fuzz_interp: compiled and interpreted unmarshal disagree: %d vs %d\n", rc2, rc);
            abort();
        }
    }
    if (rc != STUBRT_OK)
        goto done;
    out = malloc(used ? used : 1);
    if (!out)
        goto done;
    rc = interp_marshal(d, variant, val, out, used, &len, order);
    if (rc != STUBRT_OK || len != used || memcmp(out, msg, used) != 0) {
        fprintf(stderr, "fuzz_interp: marshal(unmarshal(m)) != m: %s\n", stubrt_strerror(rc));
        abort();
    }
    /* Without used, the same message is accepted only when nothing is left over. */
    rc = interp_unmarshal(d, variant, val, d->size, msg, msglen, NULL, order);
    if ((rc == STUBRT_OK) != (used == msglen))
        abort();
done:
    free(out);
    free(val);
    free(val2);
    free(text);
    interp_free(d);
    return 0;
}
