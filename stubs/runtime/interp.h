/*
 * interp: the interpreted stub. One generic marshaller and unmarshaller for
 * any argument list, driven by a type descriptor given at run time in the
 * paper's notation, e.g. "((I) (I) (I) (A[256] I) (A[86] (I I I)) (I S<1024>))".
 *
 * Values are in the same C layout as the compiled stubs' args structs
 * (int32_t for I; struct { uint32_t len; char data[n]; } for S<n>; C arrays
 * and structs with the natural alignment), and the wire bytes are the same
 * as theirs (stubrt.h), so either side of a call can be compiled or
 * interpreted.
 */
#ifndef INTERP_H
#define INTERP_H

#include <stddef.h>
#include <stdint.h>

#include "stubrt.h"

/* Limits on a descriptor, so that untrusted descriptor text cannot make the
 * interpreter recurse or allocate without bound. */
#define INTERP_MAX_DEPTH 32
#define INTERP_MAX_NODES 4096
#define INTERP_MAX_COUNT (1u << 20)
#define INTERP_MAX_VALUE (16u << 20)

enum interp_kind {
    INTERP_INT = 1,
    INTERP_STR,
    INTERP_ARR,
    INTERP_REC,
};

/* One node of the parsed descriptor; a subtree is stored contiguously, so
 * node i's first child is node i + 1 and its next sibling is i + skip. */
struct interp_node {
    uint8_t kind;
    uint32_t count; /* ARR: elements; STR: maximum length; REC: fields */
    uint32_t size;  /* bytes of the C representation */
    uint32_t align;
    uint32_t skip; /* nodes in this subtree, itself included */
};

struct interp_desc {
    uint32_t nnodes;
    size_t size;     /* sizeof the whole argument record */
    size_t wire_max; /* the most bytes a marshalled value can take */
    struct interp_node nodes[];
};

/* Parses descriptor text; on error returns STUBRT_E_DESC and, if err is not
 * NULL, a message with the 1-based column. Free the result with interp_free. */
int interp_parse(const char *text, struct interp_desc **out, char *err, size_t errlen);
void interp_free(struct interp_desc *d);

int interp_marshal(const struct interp_desc *d, int variant, const void *value, uint8_t *buf, size_t cap, size_t *len,
                   int order);
/* value_size must be d->size: the check keeps a wrong descriptor from
 * writing past the caller's value. used as in the compiled stubs: NULL means
 * every byte of the message must belong to the value. */
int interp_unmarshal(const struct interp_desc *d, int variant, void *value, size_t value_size, const uint8_t *buf,
                     size_t len, size_t *used, int order);

/* Fills a zeroed value with random contents from *seed (xorshift64), for
 * tests and the bench; full_strings gives every string its maximum length
 * (the paper's workload), otherwise lengths are random, 0 and max included. */
void interp_fill_random(const struct interp_desc *d, void *value, uint64_t *seed, int full_strings);

#endif
