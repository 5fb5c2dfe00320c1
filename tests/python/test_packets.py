"""rpcscope.packets against rpc/wire.c: a tiny C program compiled from the real sources
prints every count for many sizes, and the Python must agree on each one."""
import shutil
import subprocess
from pathlib import Path

import pytest

from rpcscope import packets as P

REPO = Path(__file__).resolve().parents[2]

C_PROG = r"""
#include <stdio.h>
#include "wire.h"
int main(void)
{
    unsigned total, pdu, mtu;
    while (scanf("%u %u %u", &total, &pdu, &mtu) == 3) {
        unsigned n = wire_frag_count(total, pdu);
        printf("%u %u %u %u %u %u %u %u", total, pdu, mtu, wire_frag_body(pdu), n,
               wire_request_packets(total, pdu, mtu), wire_window_count(total, pdu),
               wire_ip_packets(total, mtu));
        printf(" %u", wire_window_frags(total, pdu));
        for (unsigned f = 0; f <= n; f++)
            printf(" %u", wire_frag_len(f, total, pdu));
        printf("\n");
    }
    return 0;
}
"""


def _sizes():
    s = set(range(0, 70001, 97))
    bounds = {0, 1392, 1480, 1144, 2872, 4016, 8032, 12048, 16064, 20080, 24096, 32128, 48192, 64256,
              4096, 8192, 16384, 32768, 65536, 1472, 8972, 9000}
    for pdu in (4096, 1500, 9000, 256):
        body = pdu - P.HDR_LEN
        bounds.update(k * body for k in range(0, 70000 // body + 2))
    for b in bounds:
        s.update(x for x in (b - 1, b, b + 1) if 0 <= x <= 70000)
    return sorted(s)


@pytest.fixture(scope="module")
def wire_prog(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler (gcc) to build rpc/wire.c")
    d = tmp_path_factory.mktemp("wire")
    (d / "t.c").write_text(C_PROG)
    exe = d / "t"
    subprocess.run([cc, "-std=gnu11", "-D_GNU_SOURCE", "-O1", "-pthread", f"-I{REPO / 'rpc'}", str(d / "t.c"),
                    str(REPO / "rpc" / "wire.c"), str(REPO / "rpc" / "util.c"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=120)
    return exe


def test_constants_come_from_the_header():
    assert P.FROM_HEADER
    c = P.parse_header()
    assert P.HDR_LEN == c["WIRE_HDR_LEN"] == 80
    assert P.DEFAULT_MAX_PDU == c["WIRE_DEFAULT_MAX_PDU"] == 4096
    assert (P.WINDOW_INITIAL, P.WINDOW_MAX) == (c["WIRE_WINDOW_INITIAL"], c["WIRE_WINDOW_MAX"])
    assert (P.IP_HDR, P.UDP_HDR) == (c["WIRE_IP_HDR"], c["WIRE_UDP_HDR"])
    # the fallback constants (no header) agree with the header too
    assert all(P._DEFAULTS[k] == c[k] for k in P._DEFAULTS)


def test_python_matches_wire_c(wire_prog):
    cases = [(t, pdu, mtu) for pdu in (4096, 1500, 9000, 256) for mtu in (1500, 9000, 576, 1280, 65535)
             for t in _sizes()]
    inp = "".join(f"{t} {p} {m}\n" for t, p, m in cases)
    out = subprocess.run([str(wire_prog)], input=inp, capture_output=True, text=True, check=True, timeout=120).stdout
    lines = out.splitlines()
    assert len(lines) == len(cases)
    bad = []
    for (t, pdu, mtu), line in zip(cases, lines):
        v = [int(x) for x in line.split()]
        assert v[:3] == [t, pdu, mtu]
        n = P.frag_count(t, pdu)
        py = [P.frag_body(pdu), n, P.request_packets(t, pdu, mtu), P.window_count(t, pdu), P.ip_packets(t, mtu),
              P.window_frags(t, pdu)] + [P.frag_len(f, t, pdu) for f in range(n + 1)]
        if py != v[3:]:
            bad.append((t, pdu, mtu, py, v[3:]))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def test_dce_packet_counts():
    # DCE study section 3.3 and 5: 1392 / 1480 / 1144 per 4016-byte fragment; 1, 3, 6, 12, 18 request
    # packets for 1392, 4016, 8032, 16064, 24096 bytes; 6000 bytes -> 5 packets.
    assert P.ip_body_bytes(4016) == [1392, 1480, 1144]
    for size, pk in [(0, 1), (1392, 1), (1393, 2), (4016, 3), (4017, 4), (6000, 5), (8032, 6), (16064, 12),
                     (24096, 18)]:
        assert P.request_packets(size) == pk, size
        assert len(P.Message(size).ip) == pk
    assert P.Message(6000).ip == [1392, 1480, 1144, 1392, 592]
    # windows of 1, 2, 4, 8 PDUs
    assert P.windows(4016) == [1]
    assert P.windows(4017) == [1, 1]
    assert P.windows(24096) == [1, 2, 3]
    assert P.windows(15 * 4016) == [1, 2, 4, 8]
    assert P.windows(16 * 4016) == [1, 2, 4, 8, 1]
    m = P.Message(24096)
    assert (len(m.frags), m.acks, sum(m.ip)) == (6, 2, 24096)


def test_message_bytes_add_up():
    for t in _sizes()[::7]:
        for mtu in (1500, 9000, 576):
            m = P.Message(t, mtu=mtu)
            assert sum(m.frags) == t and sum(m.ip) == t
            assert len(m.ip) == P.request_packets(t, mtu=mtu)
            assert sum(m.windows) == len(m.frags)
