"""Two clocks, one timeline: the analysis maps the server's events onto the client's clock (analysis/
timeline.py) on a real two-kernel capture, tests/python/fixtures/run-two-kernels (a QEMU guest with
LTTng's kernel tracer as the server, perf on the client; see the fixtures' README).

Injected shifts, as a user meets them: the server's raw timestamps shifted by 1234 s (its decoded
columns in the cache), and separately its traces' CTF clock offset (metadata) shifted by 1234 s. Each
is recovered within the estimate's bound and applied: the RPCs, their statuses and the step tables
come out as without the shift, and no message arrives before it left.
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rpcscope.analysis import native
from rpcscope.analysis.rpcs import MEASURED, reconstruct
from rpcscope.analysis.run import load_run
from rpcscope.analysis.steps import analyze
from rpcscope.analysis.timeline import CPU_STRIDE, ClockMap, independent_check
from rpcscope.analysis.traceread import _cache_key, read_trace
from rpcscope.cli import main as rpcscope_main
from rpcscope.collectors.clockcheck import exchange, ssh_commands

RUN = pathlib.Path(__file__).parent / "fixtures" / "run-two-kernels"
REPO = pathlib.Path(__file__).resolve().parents[2]
SHIFT_NS = 1234 * 10**9
SERVER = "rpcs-server"
KERNEL_STEPS = ("C8", "C8'", "C18", "S4", "S9", "S9'")


def _copy(tmp_path_factory, name):
    d = tmp_path_factory.mktemp(name) / "run"
    shutil.copytree(RUN, d)
    return d


def _server_dirs(run_dir):
    return [p for p in (run_dir / "cases").glob(f"*/*-{SERVER}") if p.is_dir()]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = _copy(tmp_path_factory, "base")
    return analyze(d, workers=1), d


@pytest.fixture(scope="module")
def raw_shifted(tmp_path_factory):
    """The server's decoded timestamps (its traces' ts column in the cache) moved 1234 s on."""
    d = _copy(tmp_path_factory, "raw")
    analyze(d, workers=1, write=False)                 # decodes every trace into the cache
    cache = d / "analysis" / "cache"
    for p in _server_dirs(d):
        f = cache / f"trace-{_cache_key(p)}" / "ts.bin"
        ts = np.fromfile(f, np.int64)
        (ts + SHIFT_NS).tofile(f)
    return analyze(d, workers=1), d


@pytest.fixture(scope="module")
def meta_shifted(tmp_path_factory):
    """The server's traces' clock class offset (offset_s in their CTF metadata) moved 1234 s on."""
    d = _copy(tmp_path_factory, "meta")
    for p in _server_dirs(d):
        for m in p.rglob("metadata"):
            text = m.read_text()
            new, n = re.subn(r"offset_s = (\d+);", lambda x: f"offset_s = {int(x.group(1)) + SHIFT_NS // 10**9};",
                             text)
            assert n == 1, m
            m.write_text(new)
    return analyze(d, workers=1), d


def _by_case(res):
    return {r["case"]: r["clock_sync"] for r in res["rtt"]}


def _steps(res):
    return {(r["case"], r["step"]): r for r in res["steps"]}


def _same_tables(a, b):
    """Same RPCs, same complete counts, every step's n and statuses; medians within 0.01 us (the
    mapping rounds to the ns and scales by the fitted drift)."""
    ra, rb = {r["case"]: r for r in a["rtt"]}, {r["case"]: r for r in b["rtt"]}
    for c in ra:
        assert (ra[c]["rpcs"], ra[c]["complete_rpcs"]) == (rb[c]["rpcs"], rb[c]["complete_rpcs"]), c
    sa, sb = _steps(a), _steps(b)
    assert sa.keys() == sb.keys()
    for k, x in sa.items():
        y = sb[k]
        assert (x["status"], x["n"], x["missing"]) == (y["status"], y["n"], y["missing"]), (k, x, y)
        for col in ("median_us", "p10_us", "p90_us"):
            if x[col] is not None:
                assert abs(x[col] - y[col]) <= 0.01, (k, col, x[col], y[col])


def test_every_rpc_has_kernel_steps_from_both_hosts(base):
    res, d = base
    run = load_run(d)
    for case in run.cases:
        r = reconstruct(case)
        assert len(r) == case.calls, (case.id, len(r), r.excluded)
        for step in KERNEL_STEPS:
            assert (r.rows[step].status == MEASURED).all(), (case.id, step, r.rows[step].reasons)


def test_the_round_trip_path_crosses_both_hosts(base, tmp_path):
    """The round-trip path goes from the client to the server and back: with no skb shared by the two
    kernels, each receive is linked to the other host's last hand-off to its device, so nearly every
    RPC's path holds the server's receive and send steps and a network segment each way, and none of it
    is left unknown; it still adds up to each RPC's RTT."""
    d = tmp_path / "run"
    shutil.copytree(base[1], d)
    assert rpcscope_main(["rtp", str(d), "--quiet"]) == 0
    rtp = json.loads((d / "analysis" / "rtp.json").read_text())
    for c in rtp["cases"]:
        on = {p["segment"]: p for p in c["path"]}
        for seg in ("S4", "S9'", "network"):
            assert on[seg]["on_path_frac"] >= 0.9 and on[seg]["median_ns"] > 0, (c["case"], seg, on.get(seg))
        assert on.get("unknown", {}).get("on_path_frac", 0) <= 0.05, (c["case"], on.get("unknown"))
        assert c["sum_check_max_abs_ns"] == 0, c["case"]


def _messages(run_dir):
    """{case: (C8 begin, S4 end, S9 begin, C18 end) per RPC}: when the client began sending each request
    and the server's recvfrom returned it, when the server began sending the reply and the client's
    recvfrom returned it, as the reconstruction has them (the server's mapped onto the client's clock)."""
    out = {}
    for case in load_run(run_dir).cases:
        r = reconstruct(case)
        n = len(r)
        out[case.id] = tuple(np.array([r.rows[s].occurrences(i)[k][j] for i in range(n)], np.int64)
                             for s, k, j in (("C8", 0, 0), ("S4", 0, 1), ("S9", -1, 0), ("C18", -1, 1)))
        assert all(v["negative"] == 0 for v in case.timeline().one_way.values()), case.timeline().one_way
    return out


def test_no_negative_one_way_delay(base):
    """On the client's clock, with the server's events mapped: each request's first recvfrom on the
    server returns after the client began sending it, each reply arrives after the server began
    sending it."""
    for cid, (c8, s4, s9, c18) in _messages(base[1]).items():
        assert (s4 > c8).all() and (c18 > s9).all(), (cid, (s4 - c8).min(), (c18 - s9).min())


def test_the_fit_is_applied_and_recorded(base):
    res, d = base
    for cid, cs in _by_case(res).items():
        assert cs["applied"] and cs["separate_clocks"] and cs["quality"] != "failed", (cid, cs)
        # The guest's CLOCK_MONOTONIC is thousands of seconds from the host's; its realtime is not.
        assert abs(cs["offset_ns"]) > 1000 * 10**9 and abs(cs["aligned_offset_ns"]) < 10 * 10**9, cs
        assert cs["offset_ns"] == pytest.approx(cs["aligned_offset_ns"] - cs["metadata_shift_ns"], abs=1)
        rpcs = next(r["rpcs"] for r in res["rtt"] if r["case"] == cid)
        assert min(cs["pairs"].values()) >= rpcs, (cid, cs["pairs"])     # a message each way per call at least
        hosts = {h["host"]: h for h in cs["hosts"]}
        assert hosts[SERVER]["fitted"] and hosts[SERVER]["cpu_base"] == CPU_STRIDE, hosts
        assert not hosts["rpcs-client"]["fitted"] and hosts["rpcs-client"]["shift_ns"] == 0, hosts
    summary = res["clock_sync"]
    assert summary["applied"] == summary["cases"] == len(res["rtt"]) and summary["host"] == SERVER
    assert set(summary) >= {"offset_ns_range", "accuracy_ns_range", "drift_ppm_range", "points_range"}
    written = json.loads((d / "analysis" / "steps.json").read_text())
    assert written["clock_sync"]["applied"] == summary["applied"]


def test_a_bound_wider_than_the_one_way_delay_is_flagged(base):
    """Under TCG the guest's bound (hundreds of us) exceeds the messages' median one-way delay: the
    case is analysed, flagged, and `rpcscope analyze` says so."""
    res, d = base
    flagged = {f["case"]: f["flag"] for f in res["clock_sync"]["flagged"]}
    for cid, cs in _by_case(res).items():
        med = min(v["median_ns"] for v in cs["one_way"].values())
        assert bool(cs["flag"]) == (cs["accuracy_ns"] > med), (cid, cs["flag"], cs["accuracy_ns"], med)
        if cs["flag"]:
            assert "exceeds the median one-way delay" in cs["flag"] and flagged[cid] == cs["flag"]
    out = subprocess.run([sys.executable, "-c", "import sys; from rpcscope.cli import main; sys.exit(main())",
                          "analyze", str(d)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    if flagged:
        assert "FLAGGED" in out.stdout and "exceeds the median one-way delay" in out.stdout, out.stdout[-3000:]


def test_raw_shift_is_recovered_and_applied(base, raw_shifted):
    a, b = _by_case(base[0]), _by_case(raw_shifted[0])
    for cid in a:
        got = b[cid]["offset_ns"] - a[cid]["offset_ns"]
        assert abs(got - SHIFT_NS) <= b[cid]["accuracy_ns"], (cid, got - SHIFT_NS, b[cid]["accuracy_ns"])
        assert b[cid]["applied"] and b[cid]["metadata_shift_ns"] == a[cid]["metadata_shift_ns"]
        assert all(v["negative"] == 0 for v in b[cid]["one_way"].values())
    _same_tables(base[0], raw_shifted[0])
    # Applied: the server's events land where they did without the shift (the fit moves with the
    # data; rounding and float error leave a few ns).
    ma, mb = _messages(base[1]), _messages(raw_shifted[1])
    for cid in ma:
        for x, y in zip(ma[cid], mb[cid]):
            assert np.abs(x - y).max() <= 20, (cid, np.abs(x - y).max())


def test_metadata_offset_shift_is_honoured_recovered_and_applied(base, meta_shifted):
    a, b = _by_case(base[0]), _by_case(meta_shifted[0])
    for cid in a:
        assert b[cid]["metadata_shift_ns"] - a[cid]["metadata_shift_ns"] == SHIFT_NS, cid
        got = b[cid]["aligned_offset_ns"] - a[cid]["aligned_offset_ns"]
        assert abs(got - SHIFT_NS) <= b[cid]["accuracy_ns"], (cid, got - SHIFT_NS)
        # The raw clocks did not move: the hull's raw offset stays where it was.
        assert abs(b[cid]["offset_ns"] - a[cid]["offset_ns"]) <= b[cid]["accuracy_ns"], cid
    _same_tables(base[0], meta_shifted[0])
    ma, mb = _messages(base[1]), _messages(meta_shifted[1])
    for cid in ma:
        for x, y in zip(ma[cid], mb[cid]):
            assert np.abs(x - y).max() <= 20, (cid, np.abs(x - y).max())


@pytest.mark.parametrize("backend", ["python", "native"])
def test_both_readers_give_the_metadata_offset(meta_shifted, backend):
    """The clock class offset (offset_s plus offset cycles at the clock's frequency) as each reader
    records it, against the unshifted fixture's."""
    if backend == "native" and not native.available():
        pytest.skip("the native extractor is not built (make analysis)")
    for p in _server_dirs(meta_shifted[1]):
        orig = RUN / p.relative_to(meta_shifted[1])
        a = read_trace(orig, backend=backend).sources[0]["clock"]["offset_ns"]
        b = read_trace(p, backend=backend).sources[0]["clock"]["offset_ns"]
        assert b - a == SHIFT_NS, (p, backend, a, b)


def test_clock_map_is_exact_and_monotonic():
    raw = np.array([0, 1, 2, 10**12, 10**13 + 7], np.int64)
    m = ClockMap(shift_ns=5759576227706, fitted=True, x0=6 * 10**12, y0=6 * 10**12 + 3 * 10**9, slope=1.00012,
                 cpu_base=CPU_STRIDE)
    t = m.forward(raw)
    assert t.dtype == np.int64 and (np.diff(t) >= 0).all()
    assert all(abs(m.backward(int(x)) - int(r)) <= 1 for x, r in zip(t, raw))
    assert list(m.cpus(np.array([-1, 0, 3], np.int16))) == [-1, CPU_STRIDE, CPU_STRIDE + 3]
    assert ClockMap().identity and not m.identity


def test_the_ssh_check_against_the_estimate(base):
    """analysis/timeline.py independent_check on the fixture's fits: an exchange that saw the hull's
    offset (within its own bound) agrees; one 5 ms away disagrees; a failed exchange says why."""
    for cs in _by_case(base[0]).values():
        x, off = cs["reference_ns"], cs["offset_ns"]

        def exchange(server_off, when):
            return {"method": "ssh", "hosts": {"rpcs-client": {"offset_ns": 1000, "rtt_ns": 40_000, "at_ns": when},
                                               SERVER: {"offset_ns": int(1000 + server_off), "rtt_ns": 300_000,
                                                        "at_ns": when}}}
        drift = cs["slope"] - 1
        good = {"before": exchange(off - drift * 5e9, x - 5 * 10**9 - 1000),
                "after": exchange(off + drift * 5e9, x + 5 * 10**9 - 1000)}
        c = independent_check(good, cs)
        assert c["agrees"] and c["exchanges"] == 2 and c["bound_ns"] == 170_000, c
        assert abs(c["difference_ns"]) < 1000, c
        bad = {"before": exchange(off + 5_000_000, x)}
        assert independent_check(bad, cs)["agrees"] is False
        err = independent_check({"before": {"method": "ssh", "error": "rpcs-server: Connection refused"}}, cs)
        assert "Connection refused" in err["error"]
    assert independent_check(None, cs) is None


def test_a_timestamp_exchange_with_this_machine_finds_no_offset():
    """collectors/clockcheck.py's exchange through a pipe to a shell on this machine (one clock): the
    offset is zero within half the round trip."""
    r = exchange(["sh", "-c"], rounds=8)
    assert r["samples"] == 8 and r["rtt_ns"] > 0
    assert abs(r["offset_ns"]) <= r["rtt_ns"] // 2 + 1, r


def test_ssh_commands_from_an_inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: /k\n"
                   "    ansible_ssh_common_args: -o UserKnownHostsFile=/kh -o IdentitiesOnly=yes\n"
                   "  children:\n    rpc_servers:\n      hosts:\n        rpcs-server:\n"
                   "          ansible_host: 198.18.0.3\n          ansible_port: 2222\n")
    cmd = ssh_commands(inv)["rpcs-server"]
    assert cmd[0] == "ssh" and cmd[-1] == "root@198.18.0.3" and ["-p", "2222"] == cmd[cmd.index("-p"):][:2]
    assert "-i" in cmd and "UserKnownHostsFile=/kh" in cmd
    assert ssh_commands(tmp_path / "missing.yml") == {}


def test_the_report_first_screen_names_both_kernels_and_the_sync(base, tmp_path):
    """The two-kernel run's report: the first screen's hosts table has each host's kernel, clock and
    tracer, and the clock sentence the fit (offset, drift, bound, messages) and where it applied."""
    out = tmp_path / "rep"
    assert rpcscope_main(["report", str(base[1]), "--out", str(out)]) == 0
    first = (out / "report.md").read_text().split("\n## ")[1]
    assert first.startswith("Where does the time go?")
    m = json.loads((base[1] / "manifest.json").read_text())
    for name, h in m["hosts"].items():
        assert name in first and h["kernel"] in first, (name, first[:2000])
    assert "QEMU guest, own kernel" in first and "kernel: lttng" in first and "kernel: perf" in first
    assert "Clocks: two kernels" in first and "messages with a bound of" in first and "applied" in first
