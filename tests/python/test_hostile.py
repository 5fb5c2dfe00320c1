"""The reference RPC server (rpc/) against hostile peers on 127.0.0.1, with a correct rpc-client
measuring alongside.

  * TCP: idle connections, connections that announce a big record and send nothing, a 3-byte partial
    record mark: closed by the idle and progress timeouts, held to a per-source share, and the
    connection idle longest makes room for a new one; every close is counted by reason
  * UDP: partial requests that hold every reassembly slot get evicted by age; a call that finds no
    slot gets a busy reject, which rpc-client names ("server busy: reassembly slots full")
  * no amplification: a source that never acknowledges receives at most 10 times the bytes it sent
    (counted on the attacker's own sockets); a reply goes only to the source its call came from; a
    client that echoes the cookie gets its reply window by window
  * all attacks at once: a correct client completes every 16064-byte call over UDP and TCP, its p50
    within 2x of the unloaded p50 measured in the same run (rounds interleaved: unloaded, loaded; the
    median of five rounds' p50s on each side, so that one round disturbed by other work on the
    machine does not decide)

Every loop is bounded in count and in time; the whole file takes well under a minute.
"""
from __future__ import annotations

import socket
import statistics
import struct
import threading
import time

from pdu import (
    F_ACKREQ,
    F_LAST,
    FRAG_BODY,
    HDR_LEN,
    LOOPBACK,
    MAX_PDU,
    T_ACK,
    T_ACKREQ,
    T_RESPONSE,
    pack_header,
    unpack_header,
)

PROC_MAXARG, PROC_MAXRESULT = 2, 3
WINDOW_MAX_FRAGS = 32768 // MAX_PDU
AMPLIFY_LIMIT = 10  # the acceptance bound: bytes received by a non-acknowledging source / bytes it sent


def maxresult_request(activity: bytes, seq: int, size: int) -> bytes:
    """A one-fragment maxresult(size) call: 84 bytes that ask for a reply of 4 + size bytes."""
    body = struct.pack(">I", size)
    return pack_header(flags=F_LAST, activity=activity, seq=seq, proc=PROC_MAXRESULT, frag_len=4, total_len=4) + body


def frag0_8032(activity: bytes, seq: int) -> bytes:
    """Fragment 0 of an 8032-byte maxarg request (two fragments), as a client sends it (it ends a window)."""
    return pack_header(flags=F_ACKREQ, activity=activity, seq=seq, proc=PROC_MAXARG, frag_len=FRAG_BODY,
                       total_len=8032) + bytes(FRAG_BODY)


class CountingSocket:
    """A UDP socket on 127.0.0.1 that counts the datagram bytes it sends and receives."""

    def __init__(self, port: int):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((LOOPBACK, 0))
        self.sock.setblocking(False)
        self.dest = (LOOPBACK, port)
        self.sent = self.received = 0
        self.pdus: list[bytes] = []

    def send(self, d: bytes) -> None:
        try:
            self.sent += self.sock.sendto(d, self.dest)
        except BlockingIOError:
            pass

    def drain(self, keep: bool = True, max_pdus: int = 100_000) -> None:
        for _ in range(max_pdus):
            try:
                d = self.sock.recv(70000)
            except BlockingIOError:
                return
            self.received += len(d)
            if keep and len(self.pdus) < 10_000:
                self.pdus.append(d)

    def wait_for(self, pred, timeout: float = 2.0) -> dict | None:
        """The first PDU (header fields) received within timeout that satisfies pred."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            self.drain()
            for d in self.pdus[seen:]:
                h = unpack_header(d)
                if pred(h):
                    return {**h, "body": d[HDR_LEN:]}
            seen = len(self.pdus)
            time.sleep(0.002)
        return None

    def close(self) -> None:
        self.sock.close()


def wait_closed(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes this TCP connection within timeout (EOF or reset)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def tcp_open(port: int, first_bytes: bytes = b"") -> socket.socket:
    s = socket.create_connection((LOOPBACK, port), timeout=5)
    if first_bytes:
        s.sendall(first_bytes)
    return s


def close_all(socks) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


# ================================================================== TCP


def test_tcp_timeouts_share_and_eviction(rpc_server, rpc_client):
    """A 3-byte mark and announced-but-unsent records are closed by the progress timeout, idle
    connections by the idle timeout; a source holds at most its share, and a new connection takes the
    place of the one idle longest. Every close is counted under one reason."""
    srv = rpc_server(transport="tcp", trace=False,
                     extra=["--tcp-idle-ms", 1500, "--tcp-progress-ms", 500, "--conns-per-source", 8,
                            "--tcp-evict-ms", 300])
    socks = []
    try:
        partial = [tcp_open(srv.port, b"\x80\x00\x01"),  # 3 bytes of a record mark
                   tcp_open(srv.port, struct.pack(">I", 0x80000000 | 262_224)),  # a big record, nothing of it
                   tcp_open(srv.port, struct.pack(">I", 0x80000000 | 262_224) + bytes(100))]
        idle = [tcp_open(srv.port) for _ in range(5)]
        socks += partial + idle
        st = srv.wait_stats(lambda st: st["tcp_accepted"] == 8)
        assert st["tcp_accepted"] == 8, st
        # The source's share is full and nobody has been idle 300 ms: four more are refused.
        over = [tcp_open(srv.port) for _ in range(4)]
        socks += over
        assert all(wait_closed(s, 2.0) for s in over)
        # The partial records get no byte for 500 ms: closed (checked every 125 ms).
        t0 = time.monotonic()
        assert all(wait_closed(s, 3.0) for s in partial)
        assert time.monotonic() - t0 < 2.5
        # Fill the share again, let everything idle past --tcp-evict-ms: a correct client gets in.
        socks += [tcp_open(srv.port) for _ in range(3)]
        time.sleep(0.4)
        rpc_client(srv, transport="tcp", proc="echo", size=16064, calls=50, warmup=2, trace=False,
                   timeout=30).assert_ok(50)
        # The idle ones are closed by the idle timeout (1.5 s with no byte).
        assert all(wait_closed(s, 4.0) for s in idle)
    finally:
        close_all(socks)
    st = srv.stop()
    assert st["tcp_refused_per_source"] >= 4 and st["tcp_refused"] >= 4, st
    assert st["tcp_progress_timeouts"] == 3, st
    assert st["tcp_evicted"] >= 1, st
    assert st["tcp_idle_timeouts"] >= 4, st
    reasons = ("tcp_peer_closed", "tcp_bad_record", "tcp_idle_timeouts", "tcp_progress_timeouts", "tcp_evicted",
               "tcp_no_memory", "tcp_closed_at_exit")
    assert st["tcp_closed"] == sum(st[r] for r in reasons) == st["tcp_accepted"], st
    assert st["limits"]["conns_per_source"] == 8 and st["limits"]["tcp_progress_ms"] == 500, st["limits"]


# ================================================================== UDP: reassembly slots


def test_busy_reject_is_named(rpc_server, rpc_client):
    """Partial requests that stay active hold every reassembly slot: a new call gets a busy reject, and
    rpc-client names it instead of timing out silently. Once they stop, the slots expire and calls work."""
    srv = rpc_server(transport="udp", trace=False,
                     extra=["--reasm-slots", 2, "--reasm-per-source", 2, "--reasm-evict-ms", 5000,
                            "--reasm-timeout-ms", 400])
    att = CountingSocket(srv.port)
    stop = threading.Event()

    def hold_slots():
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            for i in range(2):
                att.send(frag0_8032(bytes([0xA0 + i]) * 16, 1))
            att.drain(keep=False)
            stop.wait(0.02)

    t = threading.Thread(target=hold_slots, daemon=True)
    t.start()
    try:
        time.sleep(0.1)
        run = rpc_client(srv, proc="echo", size=16064, calls=1, warmup=0, trace=False,
                         extra=["--deadline-ms", 600], timeout=30)
    finally:
        stop.set()
        t.join(timeout=10)
        att.close()
    assert run.returncode == 1, run.describe()
    assert "server busy: reassembly slots full" in run.stderr, run.describe()
    assert "no reply within" not in run.stderr, run.describe()
    time.sleep(0.6)  # the held slots expire (--reasm-timeout-ms 400)
    rpc_client(srv, proc="echo", size=16064, calls=20, warmup=0, trace=False, timeout=30).assert_ok(20)
    st = srv.stop()
    assert st["reassembly_busy"] > 0 and st["reassembly_full"] >= st["reassembly_busy"], st
    assert st["rejects_sent"] >= st["reassembly_busy"], st


def test_reassembly_evicts_the_idlest_call(rpc_server, rpc_client):
    """More partial requests than the source's share: each new one takes the place of the one idle
    longest, so a correct client's calls get through without a busy reject."""
    srv = rpc_server(transport="udp", trace=False, extra=["--reasm-slots", 8, "--reasm-per-source", 4])
    att = CountingSocket(srv.port)
    try:
        for i in range(40):
            att.send(frag0_8032(struct.pack(">I", i) * 4, 1))
            time.sleep(0.002)
        run = rpc_client(srv, proc="echo", size=16064, calls=50, warmup=0, trace=False, timeout=30)
        r = run.assert_ok(50)
        assert r["client_stats"]["rejects"] == 0, r
    finally:
        att.close()
    st = srv.stop()
    assert st["reassembly_evicted"] >= 30, st
    assert st["limits"]["reasm_per_source"] == 4, st["limits"]


# ================================================================== no amplification


def test_no_amplification(rpc_server, rpc_client):
    """maxresult(262136) asks for 262140 bytes with 84: a source that never acknowledges gets only
    ACKREQs (at most 10x what it sent, whatever it repeats); another source asking for the same call
    gets nothing; the source that echoes the cookie gets the reply, one window per ACK."""
    srv = rpc_server(transport="udp", trace=False)
    act = bytes(range(0x40, 0x50))
    req = maxresult_request(act, 7, 262_136)
    quiet, other = CountingSocket(srv.port), CountingSocket(srv.port)
    try:
        quiet.send(req)
        ready = quiet.wait_for(lambda h: h["type"] == T_ACKREQ and h["seq"] == 7)
        assert ready and ready["total_len"] == 262_140, ready
        deadline = time.monotonic() + 5
        for i in range(600):  # duplicates and pings, never an ACK
            if time.monotonic() > deadline:
                break
            quiet.send(req if i % 2 else pack_header(ptype=T_ACKREQ, activity=act, seq=7, total_len=4))
            if i % 50 == 0:
                quiet.drain()
            time.sleep(0.001)
        # Another source replays the call, pings it and forges an ACK: nothing comes back.
        other.send(req)
        other.send(pack_header(ptype=T_ACKREQ, activity=act, seq=7, total_len=4))
        other.send(pack_header(ptype=T_ACK, activity=act, seq=7, total_len=262_140, status=ready["status"]))
        time.sleep(0.3)
        quiet.drain()
        other.drain()
        assert quiet.sent >= 600 * HDR_LEN
        assert quiet.received <= AMPLIFY_LIMIT * quiet.sent, (quiet.sent, quiet.received)
        assert other.received == 0, other.received
        assert all(unpack_header(d)["type"] in (T_ACKREQ,) for d in quiet.pdus), "data went to a silent source"

        # Acknowledging with the cookie: the reply comes window by window, each one's last fragment
        # asking for the next ACK.
        got: dict[int, bytes] = {}
        quiet.pdus.clear()
        quiet.send(pack_header(ptype=T_ACK, activity=act, seq=7, total_len=262_140, status=ready["status"]))
        nfrags = -(-262_140 // FRAG_BODY)
        deadline = time.monotonic() + 5
        seen = 0
        while len(got) < nfrags and time.monotonic() < deadline:
            quiet.drain()
            for d in quiet.pdus[seen:]:
                h = unpack_header(d)
                if h["type"] != T_RESPONSE:
                    continue
                got[h["frag_num"]] = d[HDR_LEN:]
                if h["flags"] & F_ACKREQ:
                    have = next(i for i in range(nfrags + 1) if i not in got)
                    quiet.send(pack_header(ptype=T_ACK, activity=act, seq=7, total_len=262_140, window=have,
                                           status=h["status"]))
            seen = len(quiet.pdus)
            time.sleep(0.001)
        assert len(got) == nfrags, sorted(got)
        reply = b"".join(got[i] for i in range(nfrags))
        assert len(reply) == 262_140 and struct.unpack(">I", reply[:4])[0] == 262_136
    finally:
        quiet.close()
        other.close()
    # A correct client's maxresult calls: its first reply waits for its ACK, the later ones do not
    # (a 262 KB burst may overflow a small socket buffer: the client's ping recovers it, window by window).
    rpc_client(srv, proc="maxresult", size=262_136, calls=20, warmup=2, trace=False, timeout=60).assert_ok(20)
    st = srv.stop()
    assert st["wrong_source"] >= 2 and st["unexpected_type"] >= 1, st
    assert st["replies_held"] >= 2 and st["reply_acks"] >= nfrags // WINDOW_MAX_FRAGS, st
    assert st["executed"] == 1 + (1 + 2 + 20), st  # the silent source's call ran once, whatever it repeated


def test_reply_too_big_to_hold_is_named(rpc_server, rpc_client):
    """A reply that must wait for the client's acknowledgement but is larger than the reply cache's
    bound cannot wait: the server says so with a busy reject, and rpc-client names it at once."""
    srv = rpc_server(transport="udp", trace=False, extra=["--reply-cache-bytes", 4096])
    run = rpc_client(srv, proc="maxresult", size=16064, calls=1, warmup=0, trace=False,
                     extra=["--deadline-ms", 5000], timeout=30)
    assert run.returncode == 1, run.describe()
    assert "no room to keep the reply until it is acknowledged" in run.stderr, run.describe()
    # Replies within 8x of their request are not held: echo of the same size works.
    rpc_client(srv, proc="echo", size=1000, calls=10, warmup=0, trace=False, timeout=30).assert_ok(10)
    st = srv.stop()
    assert st["busy"] >= 1 and st["replies_held"] == 0, st


# ================================================================== everything at once


class Attack:
    """100 idle TCP connections, 5 that announce a 262 KB record and send nothing, one with a 3-byte
    record mark; 200 activities re-sending fragment 0 of an 8032-byte request every 50 ms; a duplicate
    flood of maxresult(262136) from a source that never acknowledges. Bounded: stop() or max_s."""

    def __init__(self, port: int, max_s: float = 30.0):
        self.port, self.max_s = port, max_s
        self.stop_ev = threading.Event()
        self.tcp: list[socket.socket] = []
        self.partial = CountingSocket(port)
        self.dup = CountingSocket(port)
        self.partial_sent = 0
        self.threads = [threading.Thread(target=self._partials, daemon=True),
                        threading.Thread(target=self._dups, daemon=True)]
        self.round = 0

    def start(self) -> None:
        self.round += 1
        self.stop_ev.clear()
        for i in range(106):
            first = b""
            if i < 5:
                first = struct.pack(">I", 0x80000000 | 262_224)
            elif i == 5:
                first = b"\x80\x00\x01"
            try:
                self.tcp.append(tcp_open(self.port, first))
            except OSError:
                pass
        self.threads = [threading.Thread(target=self._partials, daemon=True),
                        threading.Thread(target=self._dups, daemon=True)]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=10)
        close_all(self.tcp)
        self.tcp = []

    def close(self) -> None:
        self.stop()
        self.partial.close()
        self.dup.close()

    def _partials(self) -> None:
        acts = [struct.pack(">HI", self.round, i) + bytes(10) for i in range(200)]
        deadline = time.monotonic() + self.max_s
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            t0 = time.monotonic()
            for k in range(10):  # 200 datagrams per 50 ms, in ten groups of 20
                for a in acts[k * 20:(k + 1) * 20]:
                    self.partial.send(frag0_8032(a, 1))
                    self.partial_sent += 1
                self.partial.drain(keep=False)
                self.stop_ev.wait(max(0.0, t0 + (k + 1) * 0.005 - time.monotonic()))

    def _dups(self) -> None:
        act = struct.pack(">HI", self.round, 0xD0D0) + bytes(10)
        req = maxresult_request(act, 1, 262_136)
        deadline = time.monotonic() + self.max_s
        while not self.stop_ev.is_set() and time.monotonic() < deadline:
            for _ in range(10):
                self.dup.send(req)
            self.dup.drain(keep=False)
            self.stop_ev.wait(0.002)
        time.sleep(0.05)
        self.dup.drain(keep=False)


def test_correct_client_keeps_its_pace_under_attack(rpc_server, rpc_client):
    """All attacks at once against a server with default limits: a correct client completes every
    16064-byte call over UDP and TCP, its p50 within 2x of the unloaded p50 (rounds interleaved)."""
    srv = rpc_server(transport="both", executors=2, trace=False)
    attack = Attack(srv.port)
    p50 = {(t, phase): [] for t in ("udp", "tcp") for phase in ("unloaded", "loaded")}
    calls, rounds = 300, 5
    try:
        for _round in range(rounds):
            for phase in ("unloaded", "loaded"):
                if phase == "loaded":
                    attack.start()
                    time.sleep(1.2)  # past --tcp-evict-ms: an idle connection may make room
                for transport in ("udp", "tcp"):
                    run = rpc_client(srv, transport=transport, proc="echo", size=16064, calls=calls, warmup=20,
                                     trace=False, timeout=60)
                    r = run.assert_ok(calls)
                    p50[(transport, phase)].append(r["rtt_ns"]["p50"])
                if phase == "loaded":
                    attack.stop()
                    time.sleep(0.3)
        st = srv.stats()
    finally:
        attack.close()
    summary = {f"{t}-{ph}": [round(v / 1000) for v in vals] for (t, ph), vals in p50.items()}
    print(f"p50 (us) per round: {summary}; dup source sent {attack.dup.sent} B, received {attack.dup.received} B; "
          f"{attack.partial_sent} partial-request datagrams; server: {st}")
    for transport in ("udp", "tcp"):
        unloaded = statistics.median(p50[(transport, "unloaded")])
        loaded = statistics.median(p50[(transport, "loaded")])
        assert loaded <= 2 * unloaded, (transport, summary)
    # The attacks happened and were met as designed.
    assert attack.partial_sent >= rounds * 2000, attack.partial_sent
    assert st["reassembly_evicted"] > 0 and st["tcp_refused"] > 0 and st["replies_held"] >= rounds, st
    assert attack.dup.sent > 0 and attack.dup.received <= AMPLIFY_LIMIT * attack.dup.sent, \
        (attack.dup.sent, attack.dup.received)
    assert st["executed"] >= 4 * rounds * (1 + 20 + calls), st
