/* Marshalling in an NDR-like transfer syntax: 4-byte aligned items, counted
 * opaque data and strings, integers in the byte order named by the PDU's drep.
 *
 * Encoding follows the DCE steps: marshal (C3) builds a list of segments
 * (an iovector) where scalars and byte-swapped arrays are encoded into a
 * scratch buffer and bulk data is only referenced; the memory copy (C5) later
 * gathers the segments into the packets with marshal_gather(). Decoding
 * checks every length and count against the bytes actually present.
 */
#ifndef RPCS_MARSHAL_H
#define RPCS_MARSHAL_H

#include <stddef.h>
#include <stdint.h>

#define MARSHAL_MAX_SEG 32

struct marshal_seg {
    const uint8_t *ptr; /* NULL: the bytes live in scratch at off */
    size_t off, len;
};

struct marshal_enc {
    int swap; /* the wire order differs from this host's */
    uint8_t drep;
    uint8_t *scratch;
    size_t scratch_len, scratch_cap;
    struct marshal_seg seg[MARSHAL_MAX_SEG];
    int nseg;
    size_t total;
    int status; /* sticky: the first failure */
};

struct marshal_dec {
    const uint8_t *p;
    size_t len, off;
    int swap;
    uint8_t drep;
    int status;
};

void marshal_enc_init(struct marshal_enc *e, uint8_t *scratch, size_t cap, uint8_t drep);
void marshal_put_u32(struct marshal_enc *e, uint32_t v);
void marshal_put_i32(struct marshal_enc *e, int32_t v);
void marshal_put_u64(struct marshal_enc *e, uint64_t v);
void marshal_put_i64(struct marshal_enc *e, int64_t v);
/* Counted opaque bytes, referenced (not copied) when `copy` is 0. */
void marshal_put_opaque(struct marshal_enc *e, const void *data, uint32_t len, int copy);
void marshal_put_string(struct marshal_enc *e, const char *s, uint32_t len);
/* A fixed-size byte array, uncounted and unpadded (its size is the interface's), referenced. */
void marshal_put_fixed(struct marshal_enc *e, const void *data, uint32_t len);
/* Counted int32 array: referenced when no swap is needed, swapped into scratch otherwise. */
void marshal_put_i32_array(struct marshal_enc *e, const int32_t *v, uint32_t n);
/* Room for up to cap bytes encoded by someone else (a plugged-in procedure's variant),
 * at the end of the scratch buffer; marshal_commit adds the len bytes used. */
uint8_t *marshal_reserve(struct marshal_enc *e, size_t cap);
void marshal_commit(struct marshal_enc *e, size_t len);
/* Copy body bytes [off, off + len) of the encoded message to dst. */
void marshal_gather(const struct marshal_enc *e, size_t off, uint8_t *dst, size_t len);

void marshal_dec_init(struct marshal_dec *d, const uint8_t *p, size_t len, uint8_t drep);
int marshal_get_u32(struct marshal_dec *d, uint32_t *v);
int marshal_get_i32(struct marshal_dec *d, int32_t *v);
int marshal_get_u64(struct marshal_dec *d, uint64_t *v);
int marshal_get_i64(struct marshal_dec *d, int64_t *v);
/* Counted opaque bytes, returned in place; fails if the count exceeds max or the data. */
int marshal_get_opaque(struct marshal_dec *d, const uint8_t **data, uint32_t *len, uint32_t max);
int marshal_get_string(struct marshal_dec *d, const char **s, uint32_t *len, uint32_t max);
/* The bytes left, in place: a fixed-size array that ends the body (the body's length is its size). */
int marshal_get_rest(struct marshal_dec *d, const uint8_t **data, uint32_t *len);
/* Counted int32 array copied (and swapped) into out[max]. */
int marshal_get_i32_array(struct marshal_dec *d, int32_t *out, uint32_t max, uint32_t *n);
/* Fails if bytes remain undecoded. */
int marshal_dec_end(struct marshal_dec *d);

#endif
