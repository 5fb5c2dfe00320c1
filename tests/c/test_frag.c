/* Fragmentation arithmetic on both sides of every boundary where one more
 * byte costs one more IP packet or one more PDU. With the 80-byte header and
 * 4096-byte PDUs these are the DCE study's boundaries: 1392/1393 (a second IP
 * packet), 4016/4017 (a second PDU, and a second window), then every 4016
 * bytes; and the window growth 4 KiB -> 8 -> 16 -> 32 KiB. */
#include "check.h"
#include "wire.h"

int main(void)
{
    const uint32_t pdu = 4096, mtu = 1500;

    CHECK_EQ(wire_frag_body(pdu), 4016);
    /* First IP packet of a PDU: 1500 - 20 - 8 - 80 = 1392 body bytes. */
    CHECK_EQ(wire_request_packets(0, pdu, mtu), 1);
    CHECK_EQ(wire_request_packets(1392, pdu, mtu), 1);
    CHECK_EQ(wire_request_packets(1393, pdu, mtu), 2);
    /* 1392 + 1480 = 2872 in two packets; the third starts at 2873. */
    CHECK_EQ(wire_request_packets(2872, pdu, mtu), 2);
    CHECK_EQ(wire_request_packets(2873, pdu, mtu), 3);
    /* A full PDU is the paper's three packets (1392 + 1480 + 1144). */
    CHECK_EQ(wire_request_packets(4016, pdu, mtu), 3);
    CHECK_EQ(wire_ip_packets(WIRE_HDR_LEN + 4016, mtu), 3);
    CHECK_EQ(wire_request_packets(4017, pdu, mtu), 4);
    /* The paper's example: 6000 bytes are five packets. */
    CHECK_EQ(wire_request_packets(6000, pdu, mtu), 5);

    /* PDUs: one more every 4016 bytes. */
    CHECK_EQ(wire_frag_count(0, pdu), 1);
    CHECK_EQ(wire_frag_count(4016, pdu), 1);
    CHECK_EQ(wire_frag_count(4017, pdu), 2);
    CHECK_EQ(wire_frag_count(8032, pdu), 2);
    CHECK_EQ(wire_frag_count(8033, pdu), 3);
    CHECK_EQ(wire_frag_count(24096, pdu), 6);
    CHECK_EQ(wire_frag_count(24097, pdu), 7);
    CHECK_EQ(wire_frag_len(0, 4017, pdu), 4016);
    CHECK_EQ(wire_frag_len(1, 4017, pdu), 1);
    CHECK_EQ(wire_frag_len(2, 4017, pdu), 0);

    /* Windows of 1, 2, 4, then 8 PDUs: the DCE jumps 4017, 12049, 28113. */
    CHECK_EQ(wire_window_frags(4096, pdu), 1);
    CHECK_EQ(wire_window_frags(8192, pdu), 2);
    CHECK_EQ(wire_window_frags(32768, pdu), 8);
    CHECK_EQ(wire_window_count(4016, pdu), 1);
    CHECK_EQ(wire_window_count(4017, pdu), 2);
    CHECK_EQ(wire_window_count(12048, pdu), 2);  /* 1 + 2 PDUs */
    CHECK_EQ(wire_window_count(12049, pdu), 3);
    CHECK_EQ(wire_window_count(28112, pdu), 3);  /* 1 + 2 + 4 PDUs */
    CHECK_EQ(wire_window_count(28113, pdu), 4);
    CHECK_EQ(wire_window_count(60240, pdu), 4);  /* 1 + 2 + 4 + 8 PDUs */
    CHECK_EQ(wire_window_count(60241, pdu), 5);  /* the window stays at 32 KiB */

    /* Another header size would move every boundary: a 1400-byte MTU. */
    CHECK_EQ(wire_request_packets(1292, pdu, 1400), 1);
    CHECK_EQ(wire_request_packets(1293, pdu, 1400), 2);
    CHECK_DONE("test_frag");
}
