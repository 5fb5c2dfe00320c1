#include "wire.h"

#include <string.h>

#include "util.h"

uint8_t wire_native_drep(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one ? WIRE_DREP_LITTLE : WIRE_DREP_BIG;
}

static void put16(uint8_t *p, uint16_t v, int big)
{
    if (big) {
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
    } else {
        p[1] = (uint8_t)(v >> 8);
        p[0] = (uint8_t)v;
    }
}

static void put32(uint8_t *p, uint32_t v, int big)
{
    for (int i = 0; i < 4; i++)
        p[big ? i : 3 - i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v, int big)
{
    for (int i = 0; i < 8; i++)
        p[big ? i : 7 - i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint16_t get16(const uint8_t *p, int big)
{
    return big ? (uint16_t)(p[0] << 8 | p[1]) : (uint16_t)(p[1] << 8 | p[0]);
}

static uint32_t get32(const uint8_t *p, int big)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | p[big ? i : 3 - i];
    return v;
}

static uint64_t get64(const uint8_t *p, int big)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[big ? i : 7 - i];
    return v;
}

void wire_encode_hdr(const struct wire_hdr *h, uint8_t *b)
{
    int big = h->drep == WIRE_DREP_BIG;
    b[0] = h->version;
    b[1] = h->type;
    b[2] = h->flags;
    b[3] = h->drep;
    put32(b + 4, WIRE_MAGIC, big);
    memcpy(b + 8, h->interface_id, 16);
    memcpy(b + 24, h->activity, 16);
    put64(b + 40, h->boot_time, big);
    put32(b + 48, h->seq, big);
    put16(b + 52, h->proc, big);
    put16(b + 54, 0, big);
    put32(b + 56, h->frag_num, big);
    put32(b + 60, h->frag_len, big);
    put32(b + 64, h->total_len, big);
    put32(b + 68, h->window, big);
    put32(b + 72, h->status, big);
    put32(b + 76, 0, big);
}

int wire_decode_hdr(const uint8_t *b, size_t len, struct wire_hdr *h)
{
    int big;
    if (len < WIRE_HDR_LEN)
        return util_fail(UTIL_EPROTO, "PDU of %zu bytes is shorter than the %d-byte header", len, WIRE_HDR_LEN);
    h->version = b[0];
    h->type = b[1];
    h->flags = b[2];
    h->drep = b[3];
    if (h->version != WIRE_VERSION)
        return util_fail(UTIL_EPROTO, "PDU version %u, expected %u", h->version, WIRE_VERSION);
    if (h->drep != WIRE_DREP_BIG && h->drep != WIRE_DREP_LITTLE)
        return util_fail(UTIL_EPROTO, "PDU data representation 0x%02x is unknown", h->drep);
    big = h->drep == WIRE_DREP_BIG;
    if (get32(b + 4, big) != WIRE_MAGIC)
        return util_fail(UTIL_EPROTO, "PDU magic is wrong");
    if (h->type >= WIRE_TYPE_COUNT)
        return util_fail(UTIL_EPROTO, "PDU type %u is unknown", h->type);
    if (h->flags & ~WIRE_F_ALL)
        return util_fail(UTIL_EPROTO, "PDU flags 0x%02x has unknown bits", h->flags);
    memcpy(h->interface_id, b + 8, 16);
    memcpy(h->activity, b + 24, 16);
    h->boot_time = get64(b + 40, big);
    h->seq = get32(b + 48, big);
    h->proc = get16(b + 52, big);
    h->frag_num = get32(b + 56, big);
    h->frag_len = get32(b + 60, big);
    h->total_len = get32(b + 64, big);
    h->window = get32(b + 68, big);
    h->status = get32(b + 72, big);
    if ((size_t)h->frag_len != len - WIRE_HDR_LEN)
        return util_fail(UTIL_EPROTO, "PDU claims %u body bytes but carries %zu", h->frag_len, len - WIRE_HDR_LEN);
    return UTIL_OK;
}

int wire_check_frag(const struct wire_hdr *h, uint32_t max_pdu, uint32_t max_msg)
{
    uint32_t nfrags;
    if (h->total_len > max_msg)
        return util_fail(UTIL_ENOMEM, "message of %u bytes exceeds the limit of %u", h->total_len, max_msg);
    nfrags = wire_frag_count(h->total_len, max_pdu);
    if (h->frag_num >= nfrags)
        return util_fail(UTIL_EPROTO, "fragment %u of a %u-fragment message", h->frag_num, nfrags);
    if (h->frag_len != wire_frag_len(h->frag_num, h->total_len, max_pdu))
        return util_fail(UTIL_EPROTO, "fragment %u carries %u bytes, expected %u", h->frag_num, h->frag_len,
                         wire_frag_len(h->frag_num, h->total_len, max_pdu));
    if (!!(h->flags & WIRE_F_LASTFRAG) != (h->frag_num + 1 == nfrags))
        return util_fail(UTIL_EPROTO, "fragment %u of %u has a wrong last-fragment flag", h->frag_num, nfrags);
    return UTIL_OK;
}

uint32_t wire_frag_body(uint32_t max_pdu) { return max_pdu - WIRE_HDR_LEN; }

uint32_t wire_frag_count(uint32_t total, uint32_t max_pdu)
{
    uint32_t body = wire_frag_body(max_pdu);
    return total == 0 ? 1 : (uint32_t)(((uint64_t)total + body - 1) / body);
}

uint32_t wire_frag_len(uint32_t frag, uint32_t total, uint32_t max_pdu)
{
    uint32_t body = wire_frag_body(max_pdu);
    uint64_t off = (uint64_t)frag * body;
    if (off >= total)
        return 0;
    return total - off < body ? (uint32_t)(total - off) : body;
}

uint32_t wire_ip_packets(uint32_t payload, uint32_t mtu)
{
    /* Every IP fragment but the last carries a multiple of 8 bytes. */
    uint32_t per = (mtu - WIRE_IP_HDR) & ~7u;
    uint32_t udp = payload + WIRE_UDP_HDR;
    return udp <= mtu - WIRE_IP_HDR ? 1 : (udp + per - 1) / per;
}

uint32_t wire_request_packets(uint32_t total, uint32_t max_pdu, uint32_t mtu)
{
    uint32_t n = wire_frag_count(total, max_pdu), packets = 0;
    for (uint32_t f = 0; f < n; f++)
        packets += wire_ip_packets(WIRE_HDR_LEN + wire_frag_len(f, total, max_pdu), mtu);
    return packets;
}

uint32_t wire_window_frags(uint32_t window_bytes, uint32_t max_pdu)
{
    uint32_t n = window_bytes / max_pdu;
    return n ? n : 1;
}

uint32_t wire_window_count(uint32_t total, uint32_t max_pdu)
{
    uint32_t nfrags = wire_frag_count(total, max_pdu), sent = 0, windows = 0, wbytes = WIRE_WINDOW_INITIAL;
    while (sent < nfrags) {
        sent += wire_window_frags(wbytes, max_pdu);
        windows++;
        if (wbytes < WIRE_WINDOW_MAX)
            wbytes *= 2;
    }
    return windows;
}

uint64_t wire_call_id(const uint8_t activity[16], uint32_t seq)
{
    uint32_t tag = (uint32_t)activity[0] << 24 | (uint32_t)activity[1] << 16 | (uint32_t)activity[2] << 8 | activity[3];
    return (uint64_t)tag << 32 | seq;
}

const char *wire_type_name(uint8_t type)
{
    static const char *names[] = { "request", "response", "ackreq", "ack", "reject" };
    return type < WIRE_TYPE_COUNT ? names[type] : "unknown";
}
