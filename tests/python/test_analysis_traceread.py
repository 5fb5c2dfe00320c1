"""The trace reader (rpcscope.analysis.traceread) on synthetic CTF written with
bt2's sink.ctf.fs (tests/python/fixtures/make_ctf.py): perf-named and
LTTng-kernel-named inputs normalise to the same columns; discarded events, a
truncated stream, a corrupt or missing trace are reported, never raised; the
cache is reused and invalidated; two hosts' clocks are recovered."""
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
    assert ev.partial and ev.problems and ev.problems[0]["what"] in ("corrupt", "truncated")
    assert "metadata" in ev.problems[0]["message"].lower() or ev.problems[0]["message"]
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
