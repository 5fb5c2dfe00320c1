/* libFuzzer target: the server's path for untrusted bytes. The input is a
 * sequence of datagrams (2-byte length prefix each); each one goes through
 * header decoding, fragment checks, reassembly (small bounds, so eviction and
 * refusal paths run) and, for complete requests, the procedure's argument
 * unmarshalling and the reply marshalling, exactly as the listener and an
 * executor would run them.
 *
 *   make test-fuzz            a short run (part of make test)
 *   make fuzz-long            a long campaign
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "marshal.h"
#include "procs.h"
#include "reasm.h"
#include "stubcall.h"
#include "util.h"
#include "wire.h"

#define FUZZ_MAX_MSG 65536u
#define FUZZ_PDU 1024u

static void serve(const struct wire_hdr *h, const uint8_t *body, uint32_t len)
{
    static int32_t ints[FUZZ_MAX_MSG / 4];
    /* Aligned: the stub study's procedures unmarshal records into bytes. */
    static uint8_t bytes[FUZZ_MAX_MSG] __attribute__((aligned(16))), scratch[FUZZ_MAX_MSG + 64], reply[FUZZ_MAX_MSG + 64];
    struct proc_server srv = { .stub_variant = (int)(h->seq % 5) | (h->seq & 8 ? STUBCALL_INTERP : 0) };
    struct marshal_dec d;
    struct marshal_enc e;
    if (!proc_valid(h->proc))
        return;
    marshal_dec_init(&d, body, len, h->drep);
    marshal_enc_init(&e, scratch, sizeof scratch, h->drep);
    if (proc_serve(&srv, h->proc, 0, &d, &e, ints, FUZZ_MAX_MSG / 4, bytes, FUZZ_MAX_MSG - 16) == UTIL_OK &&
        e.total <= sizeof reply)
        marshal_gather(&e, 0, reply, e.total);
}

/* The stub study's procedures are served too: their unmarshalling reads untrusted bytes. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (procs_register(&stubcall_procs))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reasm r;
    if (reasm_init(&r, 4, 3 * FUZZ_MAX_MSG, FUZZ_PDU, 50))
        return 0;
    uint64_t now = 0;
    while (size >= 2) {
        size_t n = (size_t)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        if (n > size)
            n = size;
        struct wire_hdr h;
        now += 10000000; /* 10 ms per datagram, so expiry runs too */
        if (wire_decode_hdr(data, n, &h) == UTIL_OK && h.type == WIRE_REQUEST &&
            wire_check_frag(&h, FUZZ_PDU, FUZZ_MAX_MSG) == UTIL_OK) {
            const uint8_t *body = data + WIRE_HDR_LEN;
            if (h.total_len <= wire_frag_body(FUZZ_PDU)) {
                serve(&h, body, h.frag_len);
            } else {
                struct reasm_slot *s = NULL;
                if (reasm_add(&r, &h, body, now, &s) == REASM_COMPLETE) {
                    uint32_t total = s->total;
                    uint8_t *msg = reasm_take(&r, s);
                    serve(&h, msg, total);
                    free(msg);
                }
            }
        }
        reasm_expire(&r, now);
        data += n;
        size -= n;
    }
    reasm_free(&r);
    return 0;
}
