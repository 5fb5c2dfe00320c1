"""The trace reader (rpcscope.analysis.traceread) on synthetic CTF written with
bt2's sink.ctf.fs (tests/python/fixtures/make_ctf.py): perf-named and
LTTng-kernel-named inputs normalise to the same columns; discarded events, a
truncated stream, a corrupt or missing trace are reported, never raised; the
cache is reused and invalidated; two hosts' clocks are recovered."""
import os
import pathlib
import shutil
import sys

import numpy as np
import pytest

from rpcscope.analysis import traceread
from rpcscope.analysis.clocksync import estimate, match_user_packets
from rpcscope.analysis.traceread import KIND, read_trace

sys.path.insert(0, str(pathlib.Path(__file__).parent / "fixtures"))
import make_ctf  # noqa: E402


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return make_ctf.write_all(tmp_path_factory.mktemp("ctf"))


def _named(ev):
    """Columns with names and devices as strings, to compare traces with different name tables."""
    names = np.array(ev.names + [""], dtype=object)
    return {"ts": ev.ts, "cpu": ev.cpu, "tid": ev.tid, "pid": ev.pid, "kind": ev.kind,
            "name": names[ev.name], "dev": names[ev.dev], "skb": ev.skb, "nbytes": ev.nbytes,
            "tid2": ev.tid2, "state": ev.state, "vec": ev.vec}


def test_perf_and_lttng_kernel_names_normalise_identically(fx):
    lt = read_trace(fx / "lttng-kernel", backend="python")
    pf = read_trace(fx / "perf", backend="python")
    assert len(lt) == len(pf) == 50 * 22
    assert not lt.problems and not pf.problems
    a, b = _named(lt), _named(pf)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert lt.sources[0]["tracer"] == "lttng-kernel" and pf.sources[0]["tracer"] == "perf"
    # The vocabulary: kinds and names as the rest of the analysis sees them.
    got = {(traceread.KIND_NAME[k], n) for k, n in zip(a["kind"], a["name"])}
    assert got == {("syscall_entry", "sendto"), ("syscall_exit", "sendto"), ("syscall_exit", "recvfrom"),
                   ("net_xmit", "net_dev_xmit"), ("net_receive", "netif_receive_skb"),
                   ("softirq_entry", "softirq_entry"), ("softirq_exit", "softirq_exit"),
                   ("sched_waking", "sched_waking"), ("sched_switch", "sched_switch"),
                   ("copy_to_user", "skb_copy_datagram_iovec")}
    # Fields: the device hand-off and the receive share the skb; NET_RX is vector 3.
    x = lt.mask(kind="net_xmit")
    r = lt.mask(kind="net_receive")
    assert np.array_equal(lt.skb[x], lt.skb[r])
    assert set(a["dev"][x]) == {"veth-c", "veth-s"}
    assert set(lt.vec[lt.mask(kind="softirq_entry")]) == {traceread.NET_RX_VEC}
    w = lt.mask(kind="sched_waking")
    assert set(lt.tid2[w]) == {100, 200} and set(lt.vec[w]) == {0, 1}  # wakee, target CPU
    s = lt.mask(kind="sched_switch")
    assert set(lt.tid2[s]) == {0, 100, 200} and set(lt.state[s]) == {0, 1}
    assert set(lt.nbytes[lt.mask(kind="syscall_exit")]) == {80}
    assert np.all(np.diff(lt.ts) >= 0)
    assert lt.threads[100]["procname"] == "rpc-client"


def test_normalise_names():
    n = traceread.normalise
    assert n("syscalls:sys_enter_sendto") == n("syscall_entry_sendto") == ("syscall_entry", "sendto")
    assert n("syscalls:sys_exit_recvmsg") == n("syscall_exit_recvmsg") == ("syscall_exit", "recvmsg")
    assert n("net:netif_receive_skb") == n("net_if_receive_skb") == ("net_receive", "netif_receive_skb")
    assert n("irq:softirq_entry") == n("irq_softirq_entry") == ("softirq_entry", "softirq_entry")
    assert n("skb:skb_copy_datagram_iovec") == n("skb_copy_datagram_iovec")
    assert n("rpcscope:c7_begin") == ("user", "c7_begin")
    assert n("kmem:kmalloc") == ("other", "kmem:kmalloc")


def test_discarded_events_are_reported(fx):
    ev = read_trace(fx / "discarded", backend="python")
    assert ev.lossy and not ev.partial
    d = [p for p in ev.problems if p["what"] == "discarded_events"]
    assert len(d) == 1 and d[0]["count"] == 17 and d[0]["end_ns"] > d[0]["begin_ns"]
    assert len(ev) == 200 * 22


def test_truncated_stream_keeps_the_rest_and_says_so(fx, tmp_path):
    t = tmp_path / "trunc"
    shutil.copytree(fx / "multi-packet", t)
    full = read_trace(fx / "multi-packet", backend="python")
    f = t / "chan_0"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2 + 123])
    ev = read_trace(t, backend="python")
    assert ev.partial
    bad = [p for p in ev.problems if p["what"] in ("truncated", "corrupt")]
    assert len(bad) == 1 and bad[0]["stream"].endswith("chan_0") and bad[0]["message"]
    # The intact stream is all there, and the good packets of the cut one.
    assert np.sum(ev.cpu == 1) == np.sum(full.cpu == 1)
    kept = np.sum(ev.cpu == 0)
    assert 0 < kept < np.sum(full.cpu == 0) and kept == bad[0]["events_kept"]
    assert np.array_equal(ev.ts[ev.cpu == 0], full.ts[full.cpu == 0][:kept])


def test_missing_and_corrupt_traces_are_reported(fx, tmp_path):
    ev = read_trace(tmp_path / "nope")
    assert len(ev) == 0 and ev.partial and ev.problems[0]["what"] == "missing"
    c = tmp_path / "corrupt"
    shutil.copytree(fx / "lttng-kernel", c)
    (c / "metadata").write_text("/* CTF 1.8 */\ntrace { this is not TSDL };\n")
    ev = read_trace(c, backend="python")
    assert ev.partial and ev.problems and ev.problems[0]["what"] == "metadata"
    assert ev.problems[0]["file"] == str(c / "metadata") and "line 2" in ev.problems[0]["message"]
    (tmp_path / "empty").mkdir()
    ev = read_trace(tmp_path / "empty")
    assert ev.partial and "no CTF trace" in ev.problems[0]["message"]


def test_cache_is_reused_and_invalidated(fx, tmp_path):
    t = tmp_path / "t"
    shutil.copytree(fx / "lttng-kernel", t)
    cache = tmp_path / "cache"
    first = read_trace(t, cache_dir=cache, backend="python")
    assert len(list(cache.glob("trace-*"))) == 1
    second = read_trace(t, cache_dir=cache, backend="python")
    assert isinstance(second.ts, np.memmap)
    for k in traceread.COLUMNS:
        assert np.array_equal(first.cols[k], second.cols[k]), k
    assert second.names == first.names and second.threads == first.threads
    # A changed trace is decoded again.
    shutil.rmtree(t)
    shutil.copytree(fx / "perf", t)
    third = read_trace(t, cache_dir=cache, backend="python")
    assert third.sources[0]["tracer"] == "perf"


def test_stored_trace_reads_ranges_and_chunks_of_the_cache(fx, tmp_path):
    """StoredTrace reads time ranges and chunks from the cache files (not mapped), equal to the
    same rows of the whole trace."""
    whole = read_trace(fx / "perf", cache_dir=tmp_path, src=3, backend="python")
    st = traceread.StoredTrace(fx / "perf", cache_dir=tmp_path, src=3)
    assert st.dir is not None and len(st) == len(whole) > 10
    ts = np.asarray(whole.ts)
    lo, hi = int(ts[len(ts) // 4]), int(ts[len(ts) // 2])
    part = st.span(lo, hi)
    m = (ts >= lo) & (ts <= hi)
    assert not isinstance(part.ts, np.memmap)
    for k in traceread.COLUMNS:
        assert np.array_equal(part.cols[k], np.asarray(whole.cols[k])[m]), k
    assert set(part.src.tolist()) == {3}
    assert len(st.span()) == len(whole) and len(st.span(hi=int(ts[0]) - 1)) == 0
    chunks = list(st.chunks(size=7))
    assert len(chunks) == -(-len(whole) // 7)
    assert np.array_equal(np.concatenate([c.ts for c in chunks]), ts)
    # A trace the cache does not hold is kept in memory, with the same interface.
    missing = traceread.StoredTrace(tmp_path / "nothing")
    assert missing.dir is None and len(missing.span(0, 10)) == 0 and missing.problems[0]["what"] == "missing"


def test_two_hosts_shifted_clock_is_recovered(fx):
    a = read_trace(fx / "ust-client", backend="python")
    b = read_trace(fx / "ust-server", backend="python")
    assert a.sources[0]["tracer"] == "lttng-ust" and len(a) == len(b) == 600
    assert set(a.call_id.tolist()) == set(b.call_id.tolist())
    pairs = match_user_packets(a, b)
    assert len(pairs["a_to_b"][0]) == len(pairs["b_to_a"][0]) == 300
    r = estimate(pairs["a_to_b"], pairs["b_to_a"])
    assert r.quality != "failed", r.reason
    truth = lambda t: t * (1 + 25e-6) + 1_234_567_890  # noqa: E731
    t = np.array([a.ts[0], a.ts[-1]], dtype=np.float64)
    assert np.all(np.abs(r.from_reference(t) - truth(t)) <= 2_000)
    assert abs(r.drift_ppm - 25.0) <= 10


def test_merge_keeps_names_apart(fx):
    a = read_trace(fx / "ust-client", backend="python", src=0)
    k = read_trace(fx / "lttng-kernel", backend="python", src=1)
    m = traceread.merge([a, k])
    assert len(m) == len(a) + len(k) and np.all(np.diff(m.ts) >= 0)
    assert {m.name_of(i) for i in np.nonzero(m.src == 0)[0]} == {"c7_begin", "c18_end"}
    assert m.name_of(int(np.nonzero(m.kind == KIND["net_xmit"])[0][0])) == "net_dev_xmit"
    assert m.names[m.dev[m.kind == KIND["net_xmit"]][0]] in ("veth-c", "veth-s")


# ---------------------------------------------------------------- the native extractor

from rpcscope.analysis import native  # noqa: E402

needs_native = pytest.mark.skipif(not native.available(), reason="build/analysis/ctfcols not built (make analysis)")


@needs_native
@pytest.mark.parametrize("name", ["lttng-kernel", "perf", "discarded", "ust-client", "multi-packet"])
def test_native_and_python_decode_identically(fx, name, tmp_path):
    py = read_trace(fx / name, backend="python")
    nat = read_trace(fx / name, backend="native")
    assert len(nat) == len(py) > 0
    a, b = _named(py), _named(nat)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert np.array_equal(py.call_id, nat.call_id) and np.array_equal(py.frag, nat.frag)
    assert nat.problems == py.problems
    assert nat.threads == py.threads
    assert nat.sources[0]["clock"] == py.sources[0]["clock"]
    assert nat.sources[0]["tracer"] == py.sources[0]["tracer"]
    # Cached: memory-mapped straight from the extractor's files.
    c1 = read_trace(fx / name, cache_dir=tmp_path / "c", backend="native", src=2)
    c2 = read_trace(fx / name, cache_dir=tmp_path / "c", backend="native", src=2)
    assert isinstance(c2.ts, np.memmap) and np.array_equal(c1.ts, c2.ts) and set(c2.src.tolist()) == {2}


@needs_native
def test_native_falls_back_to_salvage_on_a_truncated_stream(fx, tmp_path):
    t = tmp_path / "trunc"
    shutil.copytree(fx / "multi-packet", t)
    f = t / "chan_1"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])
    ev = read_trace(t, cache_dir=tmp_path / "cache")
    assert ev.partial and any(p["what"] == "truncated" for p in ev.problems)
    again = read_trace(t, cache_dir=tmp_path / "cache")
    assert again.partial and len(again) == len(ev)


def test_tids_from_sched_switch_when_the_trace_has_no_tid_context(fx, tmp_path):
    spec = make_ctf.as_lttng_kernel(make_ctf.kernel_rounds(20))
    for e in spec["events"]:
        e["common"] = {"procname": e["common"]["procname"]}
    spec["common"], spec["common_types"] = ["procname"], {"procname": ""}
    make_ctf.write_trace(tmp_path / "notid", spec)
    ref = read_trace(fx / "lttng-kernel", backend="python")
    backends = ["python"] + (["native"] if native.available() else [])
    for backend in backends:
        for cache in (None, tmp_path / f"cache-{backend}", tmp_path / f"cache-{backend}"):
            ev = read_trace(tmp_path / "notid", backend=backend, cache_dir=cache)
            n = len(ev)
            # The first events of each CPU precede any switch: unknown; the rest are the
            # switched-in thread, which is the thread the tid context would have named.
            known = ev.tid >= 0
            assert known.sum() > n // 2
            assert np.array_equal(ev.tid[known], ref.tid[:n][known]), backend


# ---------------------------------------------------------------- ctfcols's own CTF reader (ctfread)

REAL = pathlib.Path(__file__).parent / "fixtures" / "run-udp-small" / "cases" / "udp-maxarg-8032"


def _extract(trace, out, monkeypatch, own=True):
    """Run the extractor on every CTF trace under `trace`; own=False forces libbabeltrace2."""
    with monkeypatch.context() as m:
        if not own:
            m.setenv("RPCSCOPE_CTFREAD", "0")
        meta = native.extract(list(traceread._stream_files(trace)), out)
    return meta


@needs_native
@pytest.mark.parametrize("name", ["lttng-kernel", "perf", "discarded", "ust-client", "ust-server", "multi-packet",
                                  "real-ust", "real-kernel"])
def test_ctfread_extracts_what_libbabeltrace2_extracts(fx, name, tmp_path, monkeypatch):
    """Every column file and every fact of meta.json, byte for byte, on synthetic traces (perf-
    and LTTng-named kernel events, lost events, several packets, UST with its compact and extended
    headers) and on a real LTTng-UST and perf capture (tests/python/fixtures/run-udp-small)."""
    trace = {"real-ust": REAL / "ust", "real-kernel": REAL / "kernel"}.get(name, fx / name)
    own = _extract(trace, tmp_path / "own", monkeypatch)
    ref = _extract(trace, tmp_path / "ref", monkeypatch, own=False)
    assert own["reader"] == "ctfread" and own["ctfread_refused"] is None
    assert ref["reader"] == "libbabeltrace2"
    assert own["events"] == ref["events"] > 0
    for k in ("names", "threads", "problems", "clock", "error"):
        assert own[k] == ref[k], k
    files = sorted(p.name for p in (tmp_path / "ref").glob("*.bin"))
    assert files == sorted(p.name for p in (tmp_path / "own").glob("*.bin")) and files
    for f in files:
        assert (tmp_path / "own" / f).read_bytes() == (tmp_path / "ref" / f).read_bytes(), f


def _copy(fx, name, tmp_path):
    t = tmp_path / name
    shutil.copytree(fx / name, t)
    return t


@needs_native
def test_a_trace_ctfread_refuses_is_read_by_libbabeltrace2_and_says_why(fx, tmp_path):
    t = _copy(fx, "perf", tmp_path)
    md = (t / "metadata").read_text()
    # Valid CTF that ctfread does not read (a floating-point type); libbabeltrace2 does.
    md = md.replace("trace {", "typealias floating_point { exp_dig = 11; mant_dig = 53; align = 64; } := double;\n\n"
                    "trace {", 1)
    (t / "metadata").write_text(md)
    ev = read_trace(t, backend="native")
    ref = read_trace(fx / "perf", backend="native")
    assert ev.sources[0]["reader"] == "libbabeltrace2"
    assert "floating_point" in ev.sources[0]["reader_refused"]
    assert ref.sources[0]["reader"] == "ctfread" and ref.sources[0]["reader_refused"] is None
    a, b = _named(ev), _named(ref)
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def _packets(data):
    """Byte offsets of the packets of a stream file (each starts with the CTF magic)."""
    magic = (0xC1FC1FC1).to_bytes(4, "little")
    out, i = [], data.find(magic)
    while i >= 0:
        out.append(i)
        i = data.find(magic, i + 1)
    return out


@needs_native
def test_a_missing_packet_is_left_to_libbabeltrace2_which_reports_it(fx, tmp_path):
    t = _copy(fx, "multi-packet", tmp_path)
    f = t / "chan_0"
    data = f.read_bytes()
    at = _packets(data)
    assert len(at) >= 3
    f.write_bytes(data[:at[1]] + data[at[2]:])          # the second packet gone: a sequence-number gap
    ev = read_trace(t, backend="native")
    assert ev.sources[0]["reader"] == "libbabeltrace2"
    assert "packet sequence" in ev.sources[0]["reader_refused"]
    assert any(p["what"] == "discarded_packets" for p in ev.problems)
    assert 0 < len(ev) < len(read_trace(fx / "multi-packet", backend="native"))


@needs_native
def test_a_corrupt_event_mid_stream_ends_in_the_salvage_not_a_crash(fx, tmp_path):
    t = _copy(fx, "multi-packet", tmp_path)
    f = t / "chan_1"
    data = bytearray(f.read_bytes())
    at = _packets(bytes(data))
    # Past the packet's header and context, inside its events: every byte 0xff (an event id
    # no class has, lengths beyond the packet).
    lo = at[1] + 200
    data[lo:lo + 64] = b"\xff" * 64
    f.write_bytes(bytes(data))
    ev = read_trace(t, backend="native")
    assert ev.partial and ev.problems
    assert ev.sources[0]["reader"] == "bt2-python"      # both native readers stopped; the salvage kept the rest
    assert len(ev) > 0


@needs_native
def test_random_damage_never_crashes_the_readers(fx, tmp_path):
    """Bounded random damage to the metadata and the streams of a real LTTng-UST trace (80 cases,
    a fixed seed). ctfcols ends with status 0 or 1 and a meta.json, or dies only where libbabeltrace2
    itself dies on the same files (RPCSCOPE_CTFREAD=0: it asserts on some damaged packets); and
    read_trace, in this process, always returns events with the damage reported, never raises or
    aborts. `make test-fuzz` runs ctfread under libFuzzer with ASan and UBSan."""
    import random
    import subprocess
    rng = random.Random(5)
    src = next(iter(traceread._stream_files(REAL / "ust")))
    base = {p.name: p.read_bytes() for p in src.iterdir() if p.is_file()}
    good = len(read_trace(src, backend="native"))
    t, out = tmp_path / "t", tmp_path / "out"
    damaged = 0
    for case in range(80):
        for d in (t, out):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
        for name, data in base.items():
            data = bytearray(data)
            if (name == "metadata") == (case % 3 == 0) and data:
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
                if case % 5 == 0:
                    del data[rng.randrange(len(data)):]
            (t / name).write_bytes(bytes(data))
        r = subprocess.run([str(native.EXTRACTOR), str(out), str(t)], capture_output=True, text=True, timeout=60)
        if r.returncode not in (0, 1):
            ref = subprocess.run([str(native.EXTRACTOR), str(out), str(t)], capture_output=True, text=True,
                                 timeout=60, env={**os.environ, "RPCSCOPE_CTFREAD": "0"})
            assert r.returncode == ref.returncode < 0, (case, r.returncode, r.stderr[-300:])
        else:
            assert (out / "meta.json").exists(), case
        ev = read_trace(t)
        assert len(ev) <= good or ev.problems, case
        damaged += bool(ev.problems)
    assert damaged > 50            # the damage was seen, not only written
