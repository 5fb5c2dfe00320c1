"""The reference RPC server (rpc/) under a flood of 100,000 random and half-valid datagrams on 127.0.0.1,
next to a well-behaved client: the server survives, stays small, counts what it rejected, and keeps
serving.

rpc-client --json checks every result byte for byte itself (exit 1 on any mismatch).
Servers come from conftest.py's factories, which kill them at teardown whatever happens.
"""
from __future__ import annotations

import collections
import random
import socket
import struct
import threading
import time

import pytest
from pdu import (
    F_ACKREQ,
    F_LAST,
    F_ONEWAY,
    F_RETRANS,
    FRAG_BODY,
    HDR_LEN,
    LOOPBACK,
    MAGIC,
    MAX_MSG,
    T_ACK,
    T_ACKREQ,
    T_REJECT,
    T_RESPONSE,
    UNKNOWN_PROC_MIN,
    frag_count,
    frag_len,
    pack_header,
)

RSS_LIMIT_KIB = 64 << 10


# ================================================================== 3. flood

FLOOD_DATAGRAMS = 100_000
BG_CALLS = 50  # calls per run of the well-behaved client that runs during the flood
FLOOD_MAX_SECONDS = 60.0


class Flood:
    """Seeded generator of hostile datagrams. `expect` counts those whose fate the server's
    statistics must show whatever state the server is in (each lands in exactly one counter)."""

    KINDS = {  # kind: weight
        "garbage": 18, "short": 3, "corrupt": 10, "bad_frag": 8, "too_big": 5, "unknown_proc": 5,
        "single": 10, "single_good": 2, "multi": 22, "conflict": 2, "ping": 5, "other_type": 3,
        "big_reply": 0.3, "dup": 4,
    }

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.blob = self.rng.randbytes(1 << 20)
        self.kinds = list(self.KINDS)
        self.weights = list(self.KINDS.values())
        self.calls = [self._new_call() for _ in range(256)]
        self.prev, self.prev_counter = b"", None
        self.expect = collections.Counter()  # server counter -> datagrams that must land in it
        self.sent_kinds = collections.Counter()

    def _bytes(self, n: int) -> bytes:
        off = self.rng.randrange(0, len(self.blob) - n + 1)
        return self.blob[off:off + n]

    def _activity(self) -> bytes:
        return self._bytes(16)

    def _new_call(self, activity=None, seq=None) -> dict:
        rng = self.rng
        return {"activity": activity or self._activity(), "seq": seq if seq is not None else rng.randrange(1 << 32),
                "total": rng.randrange(FRAG_BODY + 1, rng.choice((8 * FRAG_BODY, MAX_MSG)) + 1),
                "proc": rng.randrange(10), "drep": rng.choice((0x00, 0x10))}

    def _valid_frag(self, call: dict, frag: int, extra_flags: int = 0) -> bytes:
        total = call["total"]
        n = frag_len(frag, total)
        flags = extra_flags | (F_LAST if frag + 1 == frag_count(total) else 0)
        return pack_header(flags=flags, drep=call["drep"], activity=call["activity"], seq=call["seq"],
                           proc=call["proc"], frag_num=frag, frag_len=n, total_len=total) + self._bytes(n)

    def next(self) -> bytes:
        rng = self.rng
        kind = rng.choices(self.kinds, self.weights)[0]
        if kind == "dup" and not self.prev:
            kind = "garbage"
        self.sent_kinds[kind] += 1
        counter = None
        drep = rng.choice((0x00, 0x10))
        if kind == "garbage":  # random bytes: never a valid header (version, drep and magic all must match)
            d = self._bytes(rng.randrange(0, 9001))
            if len(d) >= 8:
                d = bytes([d[0] if d[0] != 1 else 0]) + d[1:]
            counter = "malformed"
        elif kind == "short":
            d = self._bytes(rng.randrange(0, HDR_LEN))
            counter = "malformed"
        elif kind == "corrupt":  # a good header with one thing wrong
            body = self._bytes(rng.randrange(0, FRAG_BODY + 1))
            fields = dict(drep=drep, activity=self._activity(), seq=rng.randrange(1 << 32), proc=rng.randrange(10),
                          frag_len=len(body), total_len=len(body))
            what = rng.choice(("version", "magic", "flags", "drep", "type", "frag_len"))
            if what == "version":
                fields["version"] = rng.choice((0, 2, 255))
            elif what == "magic":
                fields["magic"] = rng.randrange(1 << 32)
                if fields["magic"] == MAGIC:
                    fields["magic"] ^= 1
            elif what == "flags":
                fields["flags"] = rng.choice((0x10, 0x20, 0x40, 0x80, 0xF1))
            elif what == "drep":
                fields["drep"] = rng.choice((0x01, 0x11, 0x20, 0xFF))
            elif what == "type":
                fields["ptype"] = rng.randrange(5, 256)
            else:
                fields["frag_len"] = len(body) + rng.choice((-1, 1, 4096, 1 << 31)) if body else 1
                fields["frag_len"] &= 0xFFFFFFFF
            d = pack_header(**fields) + body
            counter = "malformed"
        elif kind == "bad_frag":  # a well-formed PDU whose fragment arithmetic is wrong
            total = rng.randrange(0, MAX_MSG + 1)
            nfr = frag_count(total)
            what = rng.choice(("frag_num", "frag_len", "last_flag"))
            frag = rng.randrange(nfr)
            n = frag_len(frag, total)
            flags = F_LAST if frag + 1 == nfr else 0
            if what == "frag_num":
                frag = rng.choice((nfr, nfr + 1, 1 << 20, 0xFFFFFFFF))
                n = rng.randrange(0, FRAG_BODY + 1)
            elif what == "frag_len":
                n = rng.choice([x for x in (0, 1, n - 1, n + 1, FRAG_BODY + 1, 8000) if x >= 0 and x != n])
            else:
                flags ^= F_LAST
            d = pack_header(flags=flags, drep=drep, activity=self._activity(), seq=rng.randrange(1 << 32),
                            proc=rng.randrange(10), frag_num=frag, frag_len=n, total_len=total) + self._bytes(n)
            counter = "bad_fragment"
        elif kind == "too_big":  # absurd total length
            n = rng.randrange(0, FRAG_BODY + 1)
            total = rng.choice((MAX_MSG + 1, 1 << 20, 1 << 31, 0xFFFFFFFF, rng.randrange(MAX_MSG + 1, 1 << 32)))
            d = pack_header(flags=rng.choice((0, F_LAST)), drep=drep, activity=self._activity(),
                            seq=rng.randrange(1 << 32), proc=rng.randrange(1 << 16),
                            frag_num=rng.choice((0, 1, 0xFFFFFFFF)), frag_len=n, total_len=total) + self._bytes(n)
            counter = "too_big"
        elif kind == "unknown_proc":
            n = rng.randrange(0, FRAG_BODY + 1)
            d = pack_header(flags=F_LAST, drep=drep, activity=self._activity(), seq=rng.randrange(1 << 32),
                            proc=rng.randrange(UNKNOWN_PROC_MIN, 1 << 16), frag_len=n, total_len=n) + self._bytes(n)
            counter = "unknown_proc"
        elif kind == "single":  # a one-fragment call of a real procedure with random arguments
            n = rng.randrange(0, FRAG_BODY + 1)
            d = pack_header(flags=F_LAST | rng.choice((0, F_ONEWAY, F_RETRANS, F_ACKREQ)), drep=drep,
                            activity=self._activity(), seq=rng.randrange(1 << 32), proc=rng.randrange(10),
                            frag_len=n, total_len=n) + self._bytes(n)
        elif kind == "single_good":  # calls that really run and return: null, incr, add from strangers
            proc, body = rng.choice(((0, b""), (1, b""), (4, self._bytes(8))))
            d = pack_header(flags=F_LAST, activity=self._activity(), seq=rng.randrange(1 << 32), proc=proc,
                            frag_len=len(body), total_len=len(body)) + body
        elif kind in ("multi", "conflict"):  # fragments of a pool of big calls: reassembly pressure
            i = rng.randrange(len(self.calls))
            call = self.calls[i]
            if rng.random() < 0.01:  # the "client" moves on to its next call
                call = self.calls[i] = self._new_call(call["activity"], (call["seq"] + 1) & 0xFFFFFFFF)
            if kind == "conflict":  # same call, different length or procedure
                call = dict(call, total=rng.randrange(FRAG_BODY + 1, MAX_MSG + 1), proc=(call["proc"] + 1) % 10)
            frag = rng.randrange(frag_count(call["total"]))
            d = self._valid_frag(call, frag, rng.choice((0, 0, F_ACKREQ, F_RETRANS)))
        elif kind == "ping":
            if rng.random() < 0.5:
                call = rng.choice(self.calls)
                act, seq, total = call["activity"], call["seq"], call["total"]
            else:
                act, seq = self._activity(), rng.randrange(1 << 32)
                total = rng.choice((0, 100, MAX_MSG, MAX_MSG + 1, 0xFFFFFFFF))
            d = pack_header(ptype=T_ACKREQ, drep=drep, activity=act, seq=seq, proc=rng.randrange(1 << 16),
                            frag_num=rng.randrange(1 << 32), total_len=total)
            counter = "pings"
        elif kind == "other_type":  # responses, acks and rejects are for clients, not servers
            n = rng.randrange(0, 200)
            d = pack_header(ptype=rng.choice((T_RESPONSE, T_ACK, T_REJECT)), flags=F_LAST, drep=drep,
                            activity=self._activity(), seq=rng.randrange(1 << 32), frag_len=n,
                            total_len=n, window=rng.randrange(1 << 32)) + self._bytes(n)
            counter = "unexpected_type"
        elif kind == "big_reply":  # large valid maxresult calls: reply cache byte pressure
            body = struct.pack(">I", rng.randrange(50_000, 200_000))
            d = pack_header(flags=F_LAST, activity=self._activity(), seq=rng.randrange(1 << 32), proc=3,
                            frag_len=4, total_len=4) + body
        else:  # dup: the previous datagram again
            d, counter = self.prev, self.prev_counter
        if counter:
            self.expect[counter] += 1
        self.prev, self.prev_counter = d, counter
        return d


FLOOD_SERVERS = {
    # the default bounds (8 MiB of partial requests, 8 MiB of cached replies) with executors
    "pool-default-bounds": (2, ["--reasm-timeout-ms", "300"]),
    # inline, with tiny bounds: eviction and "reassembly full" all the time
    "inline-small-bounds": (0, ["--reasm-timeout-ms", "300", "--reply-cache", "16", "--reply-cache-bytes", "65536",
                                "--reasm-slots", "4", "--reasm-bytes", "131072"]),
}


@pytest.mark.parametrize("config", list(FLOOD_SERVERS))
def test_flood_of_hostile_datagrams(rpc_server, rpc_client, config):
    executors, extra = FLOOD_SERVERS[config]
    srv = rpc_server(transport="udp", executors=executors, extra=extra)
    run_client = rpc_client
    flood = Flood(seed=20240601 + executors)
    stop = threading.Event()
    rss_samples: list[int] = []
    client_runs, final_runs = [], []
    errors: list[BaseException] = []
    mid_stats = None

    def sample_rss():
        while not stop.is_set():
            kib = srv.rss_kib()
            if kib is not None:
                rss_samples.append(kib)
            stop.wait(0.02)

    def client_loop():  # a well-behaved client for the whole flood
        try:
            deadline = time.monotonic() + FLOOD_MAX_SECONDS + 30
            while not stop.is_set() and time.monotonic() < deadline:
                client_runs.append(run_client(srv, transport="udp", proc="echo", size=4000, calls=BG_CALLS,
                                              warmup=0, timeout=60))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=sample_rss, daemon=True), threading.Thread(target=client_loop, daemon=True)]
    for t in threads:
        t.start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = 0
    t0 = time.monotonic()
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((LOOPBACK, 0))
        sock.setblocking(False)
        dest = (LOOPBACK, srv.port)
        d = None
        # Pace: keep the server's receive queue under a quarter of its buffer (rpc-server asks for 4 MiB,
        # the kernel caps that at net.core.rmem_max and doubles it), so that it sees every datagram.
        with open("/proc/sys/net/core/rmem_max") as f:
            pace_bytes = min(4 << 20, int(f.read())) * 2 // 4
        while sent < FLOOD_DATAGRAMS and time.monotonic() - t0 < FLOOD_MAX_SECONDS:
            if d is None:
                d = flood.next()
            try:
                sock.sendto(d, dest)
            except BlockingIOError:  # our send buffer is full: retry the same datagram
                time.sleep(0.001)
                continue
            d = None
            sent += 1
            if sent % 200 == 0:
                # Drain what the server answered, and let its receive queue shrink before sending more.
                try:
                    for _ in range(10_000):
                        sock.recv(65536)
                except BlockingIOError:
                    pass
                for _ in range(500):
                    info = srv.udp_socket()
                    if info is None or info["rx_queue"] < pace_bytes or time.monotonic() - t0 > FLOOD_MAX_SECONDS:
                        break
                    time.sleep(0.001)
            if sent % 10_000 == 0:
                assert srv.alive(), f"rpc-server died after {sent} datagrams:\n{srv.stderr_text()[-3000:]}"
            if sent == FLOOD_DATAGRAMS // 2:
                mid_stats = srv.stats()  # SIGUSR1 in the middle of the flood
                assert mid_stats["malformed"] > 0, mid_stats
        flood_s = time.monotonic() - t0
        assert srv.alive(), f"rpc-server died during the flood:\n{srv.stderr_text()[-3000:]}"
        during_rss = max(rss_samples, default=0)
    finally:
        stop.set()
        sock.close()
        for t in threads:
            t.join(timeout=90)
    assert not errors, errors
    assert sent == FLOOD_DATAGRAMS, f"only {sent} datagrams in {FLOOD_MAX_SECONDS} s"

    # The well-behaved client got every answer right during the flood...
    assert client_runs, "the client never finished a run"
    for run in client_runs:
        run.assert_ok(BG_CALLS)
    # ...and after it: partial requests expire (--reasm-timeout-ms 300), so multi-window calls work again.
    time.sleep(0.5)
    after_rss = [srv.rss_kib()]
    for proc, size, calls in [("echo", 4000, 300), ("maxarg", 24096, 50), ("maxresult", 20000, 50), ("incr", 0, 50)]:
        final_runs.append(run_client(srv, proc=proc, size=size, calls=calls, warmup=0, timeout=60))
        final_runs[-1].assert_ok(calls)
    after_rss.append(srv.rss_kib())
    assert mid_stats is not None
    assert srv.alive()
    sock_info = srv.udp_socket()
    st = srv.stop()

    kernel_drops = sock_info["drops"] if sock_info else -1
    report = (f"flood ({config}): {sent} datagrams in {flood_s:.1f} s, kinds {dict(flood.sent_kinds)}; "
              f"expected {dict(flood.expect)}; "
              f"kernel drops at the server {kernel_drops}; RSS max {during_rss} KiB during, {after_rss} KiB after; "
              f"server stats {st}")
    print(report)
    assert during_rss < RSS_LIMIT_KIB and None not in after_rss and max(after_rss) < RSS_LIMIT_KIB, report
    assert mid_stats["datagrams"] <= st["datagrams"]
    # Everything the server was sent was seen by it (the pacing keeps its queue short) ...
    client_pings = sum(r.result["client_stats"]["pings"] for r in client_runs + final_runs)
    if kernel_drops == 0:
        assert st["datagrams"] >= sent, report
        for counter, n in flood.expect.items():
            extra = client_pings if counter == "pings" else 0
            assert st[counter] == n + extra, (counter, st[counter], n, extra, report)
    else:  # the kernel dropped some: each counter is bounded by what was sent
        assert st["datagrams"] >= sent // 2, report
        for counter, n in flood.expect.items():
            extra = client_pings if counter == "pings" else 0
            assert 0 < st[counter] <= n + extra, (counter, st[counter], n, report)
    # ... and the reassembly and at-most-once machinery was exercised and stayed bounded.
    for counter in ("bad_args", "fragments_stored", "duplicate_fragments", "reassembly_full",
                    "reassembly_conflict", "reassembly_expired", "answered_from_cache", "rejects_sent", "acks_sent"):
        assert st[counter] > 0, (counter, report)
    assert st["send_errors"] == 0, report
