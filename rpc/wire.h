/* The PDU format and the packet arithmetic that follows from it.
 *
 * Every PDU starts with an 80-byte header, the size of DCE's connectionless
 * header, so that the packet boundaries fall where the DCE study's did: with
 * a 4096-byte maximum PDU a fragment carries 4016 bytes of body, and the
 * first IP packet of a datagram carries 1500 - 20 (IP) - 8 (UDP) - 80 = 1392
 * of them. One more byte costs one more IP packet at 1393, one more PDU (and,
 * beyond the first window, one more send/receive cycle) at 4017.
 *
 * Header layout (all multi-byte fields in the byte order named by drep):
 *   0 version   1 type   2 flags   3 drep   4 magic "RPCS"
 *   8 interface id (16)   24 activity id (16: identifies one client thread)
 *  40 boot time of the server (8)   48 seq (call number within the activity)
 *  52 proc (2)  54 reserved (2)  56 frag num  60 frag len  64 total len
 *  68 window    72 status        76 reserved
 *
 * Acknowledging replies: a RESPONSE fragment flagged WIRE_F_ACKREQ, or an
 * ACKREQ PDU from the server (a reply of total_len bytes is ready), carries a
 * cookie in status; the client answers with an ACK whose window is the number
 * of reply fragments it has in order and whose status echoes the cookie. A
 * client's ACKREQ (ping) carries the same count in window.
 */
#ifndef RPCS_WIRE_H
#define RPCS_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_HDR_LEN 80
#define WIRE_VERSION 1
#define WIRE_MAGIC 0x52504353u /* "RPCS" */
#define WIRE_DEFAULT_MAX_PDU 4096u
#define WIRE_MIN_MAX_PDU 256u
#define WIRE_MAX_MAX_PDU 65000u
#define WIRE_WINDOW_INITIAL 4096u /* bytes; doubles per acknowledged window */
#define WIRE_WINDOW_MAX 32768u
#define WIRE_IP_HDR 20u
#define WIRE_UDP_HDR 8u
#define WIRE_TCP_MARK 4u /* record mark before each TCP message */

enum wire_type {
    WIRE_REQUEST = 0,
    WIRE_RESPONSE = 1,
    WIRE_ACKREQ = 2, /* "what have you got?": sent by a client whose wait timed out */
    WIRE_ACK = 3,    /* window acknowledgement: window = fragments received in order */
    WIRE_REJECT = 4, /* status says why */
    WIRE_TYPE_COUNT
};

enum wire_flag {
    WIRE_F_LASTFRAG = 0x01, /* the last fragment of the message */
    WIRE_F_ACKREQ = 0x02,   /* this fragment ends a window: acknowledge it */
    WIRE_F_ONEWAY = 0x04,   /* no result: the client does not wait */
    WIRE_F_RETRANS = 0x08,  /* a retransmission */
    WIRE_F_ALL = 0x0f,
};

enum wire_drep { WIRE_DREP_BIG = 0x00, WIRE_DREP_LITTLE = 0x10 };

enum wire_reject {
    WIRE_REJ_NONE = 0,
    WIRE_REJ_UNKNOWN_PROC = 1,
    WIRE_REJ_BAD_ARGS = 2,
    WIRE_REJ_TOO_BIG = 3,
    WIRE_REJ_BUSY = 4,
    WIRE_REJ_OLD_CALL = 5,
};

/* What is full, in the window field of a WIRE_REJ_BUSY reject. */
enum wire_busy {
    WIRE_BUSY_QUEUE = 1,       /* the calls waiting for an executor */
    WIRE_BUSY_REASSEMBLY = 2,  /* the reassembly slots (or bytes) for partial requests */
    WIRE_BUSY_REPLY_CACHE = 3, /* no room to keep a reply until the client acknowledges it */
};

struct wire_hdr {
    uint8_t version, type, flags, drep;
    uint8_t interface_id[16];
    uint8_t activity[16];
    uint64_t boot_time;
    uint32_t seq;
    uint16_t proc;
    uint32_t frag_num, frag_len, total_len, window, status;
};

/* The byte order of this host, as a drep value. */
uint8_t wire_native_drep(void);

void wire_encode_hdr(const struct wire_hdr *h, uint8_t *buf);
/* Decode and check what the header alone can tell: length, version, magic,
 * type, flags, drep, and that frag_len matches the datagram. */
int wire_decode_hdr(const uint8_t *buf, size_t len, struct wire_hdr *h);
/* Check a request/response fragment against the limits: frag_len, frag_num and
 * total_len must agree with the fragment arithmetic for max_pdu. */
int wire_check_frag(const struct wire_hdr *h, uint32_t max_pdu, uint32_t max_msg);

/* Body bytes per fragment, and fragments for a body of total bytes (>= 1). */
uint32_t wire_frag_body(uint32_t max_pdu);
uint32_t wire_frag_count(uint32_t total, uint32_t max_pdu);
uint32_t wire_frag_len(uint32_t frag, uint32_t total, uint32_t max_pdu);
/* IP packets that one UDP datagram of `payload` bytes becomes on a link with this MTU. */
uint32_t wire_ip_packets(uint32_t payload, uint32_t mtu);
/* IP packets of a whole request body over UDP (all its fragments). */
uint32_t wire_request_packets(uint32_t total, uint32_t max_pdu, uint32_t mtu);
/* Fragments in a window of window_bytes (at least one). */
uint32_t wire_window_frags(uint32_t window_bytes, uint32_t max_pdu);
/* Windows a request of `total` bytes is sent in (each but the last asks for an ack). */
uint32_t wire_window_count(uint32_t total, uint32_t max_pdu);

/* The call id that tracepoints carry: activity tag (first 4 bytes) << 32 | seq. */
uint64_t wire_call_id(const uint8_t activity[16], uint32_t seq);

const char *wire_type_name(uint8_t type);

#endif
