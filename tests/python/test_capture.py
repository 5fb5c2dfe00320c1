"""`rpcscope capture` on the local testbed, for real: perf kernel traces, LTTng-UST traces, both hosts.

Captures sizes 0 and 4016 of maxarg over UDP and TCP with the perf collector,
then checks the run directory against the contract in collectors/README.md:
every file present, babeltrace2 reads every trace, nothing discarded, the
kernel trace holds the client's and the server's send and receive syscalls and
the transmit and receive of every packet on both hosts' devices. An
interrupted capture must leave nothing running. Bad input fails before
anything starts. The benchmarks that run on captures (bench layout, bench
interleave) leave nothing running either. The other collectors and modes are
test_capture_modes.py's.

Safety: the testbed's addresses are in 198.18.0.0/15 inside namespaces the
test creates; the module holds the machine-wide testbed test lock (as
test_testbed.py does) and takes the testbed down even when a test fails.
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess

import pytest
from helpers import (
    CAPTURE_MARKS,
    REPO,
    RPCSCOPE,
    capture_leftovers,
    ftrace_instances,
    kernel_events,
    module_testbed,
    rpcscope,
    sh,
)

from rpcscope.analysis.cpuspeed import cpu_losses
from rpcscope.analysis.run import load_run, path_shape
from rpcscope.analysis.steps import analyze
from rpcscope.analysis.wakeup import run_wake_costs
from rpcscope.bench_interleave import WAYS, pair_spread
from rpcscope.collectors import lttng as clttng, perf as cperf
from rpcscope.collectors.capture import (
    DEFAULT_REPEATS,
    MAX_EXTRA_ROUNDS,
    PACE_SLICES,
    SWEEP_AGREE_PCT,
    Sessiond,
    aslr_prefix,
    choose_sweep,
    placement_cpus,
    run_pace_ns,
    settled_rounds,
    sweeps_settled,
)
from rpcscope.testbed.config import DEFAULT_CLIENT as CLIENT, DEFAULT_SERVER as SERVER

CALLS, WARMUP = 300, 50

pytestmark = CAPTURE_MARKS



def _capture_refused_while_down():
    """Bad input before anything exists: the testbed is down."""
    p = rpcscope("capture", "--sizes", "0", "--out", "/tmp/rpcscope-capture-never", check=False)
    assert p.returncode == 2 and "testbed is down" in p.stderr and "rpcscope testbed up" in p.stderr, p.stderr
    assert not pathlib.Path("/tmp/rpcscope-capture-never").exists()


@pytest.fixture(scope="module")
def testbed():
    """The testbed, up for this module only; one testbed test module at a time on this machine."""
    with module_testbed(while_down=_capture_refused_while_down):
        yield


def test_bad_input_fails_before_anything_starts(tmp_path):
    out = tmp_path / "run"
    for args, words in [
        (["--proc", "nosuch"], "unknown procedure"),
        (["--proc", "null", "--sizes", "0,10"], "takes no payload"),
        (["--proc", "maxarg", "--sizes", "0,999999"], "at most 262136"),
        (["--sizes", "a,b"], "--sizes"),
        (["--transport", "sctp"], "--transport"),
        (["--sizes", "0,4016", "--holdout", "6000"], "not among --sizes"),
        (["--aslr", "sometimes"], "--aslr"),
        (["--deadline-seconds", "0"], "--deadline-seconds 0: give 1 to 86400"),
        (["--user-only-runs", "--calibration", "none"], "--user-only-runs"),
        (["--clock-reads", "--inventory", "/nonexistent.yml"], "--clock-reads: the local testbed only"),
    ]:
        p = rpcscope("capture", *args, "--out", str(out), check=False)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert words in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert not out.exists()


def test_aslr_off_starts_every_run_with_one_address_layout():
    """--aslr off (the default): the prefix the RPC processes start under sets ADDR_NO_RANDOMIZE, which
    exec keeps, so two runs map their stack at one address; on leaves the kernel's randomized layout."""
    addr_no_randomize = 0x0040000               # include/uapi/linux/personality.h

    def run(setting, *argv):
        return subprocess.run([*aslr_prefix(setting), *argv], capture_output=True, text=True, check=True).stdout

    assert int(run("off", "cat", "/proc/self/personality"), 16) & addr_no_randomize
    assert not int(run("on", "cat", "/proc/self/personality"), 16) & addr_no_randomize

    def stack(setting):
        return run(setting, "grep", "-F", "[stack]", "/proc/self/maps")

    assert stack("off") == stack("off")
    if pathlib.Path("/proc/sys/kernel/randomize_va_space").read_text().strip() != "0":
        assert len({stack("on") for _ in range(3)}) > 1


def test_bench_layout_runs_both_layouts_alternately_and_leaves_nothing(testbed):
    """`rpcscope bench layout`: fresh untraced processes per run, each setting's p50s and spread."""
    bad = rpcscope("bench", "layout", "--runs", "1", check=False)
    assert bad.returncode == 2 and "--runs 1" in bad.stderr, bad.stderr
    p = rpcscope("bench", "layout", "--sizes", "0,1392", "--runs", "3", "--calls", "300", "--warmup", "30", "--json",
                 timeout=300)
    r = json.loads(p.stdout)
    assert r["build"] == "notrace" and r["runs"] == 3 and [s["size"] for s in r["sizes"]] == [0, 1392]
    for s in r["sizes"]:
        for setting in ("random", "fixed"):
            runs = s["runs_p50_ns"][setting]
            assert len(runs) == 3 and all(x > 0 for x in runs)
            assert s[f"p50_us_{setting}"] == sorted(runs)[1] / 1e3 and s[f"spread_%_{setting}"] >= 0
    assert capture_leftovers(pathlib.Path("/nonexistent")) == []


def test_bench_interleave_runs_both_ways_and_leaves_nothing(testbed):
    """`rpcscope bench interleave`: two identical pairs one after the other and taking turns, every
    round's p50s and the spread of their ratio; no process left, none stopped."""
    for args, words in [(["--rounds", "1"], "--rounds 1"), (["--slice-ms", "0"], "--slice-ms 0"),
                        (["--size", "999999"], "at most")]:
        bad = rpcscope("bench", "interleave", *args, check=False)
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
    p = rpcscope("bench", "interleave", "--rounds", "2", "--seconds", "0.2", "--slice-ms", "5", "--json", timeout=300)
    r = json.loads(p.stdout)
    assert r["build"] == "notrace" and r["rounds"] == 2 and [w["way"] for w in r["ways"]] == list(WAYS)
    assert r["b_build"] == "notrace"
    for w in r["ways"]:
        assert len(w["p50_ns"]) == 2 and all(a > 0 and b > 0 for a, b in w["p50_ns"]), w
        assert (w["ln_ratio_mean_%"], w["ln_ratio_sd_%"], w["ln_ratio_spread_%"]) == pair_spread(w["p50_ns"])
    # B of the clock build: its marks' cost beside A, the probe effect's anchor (analysis/MODEL.md).
    p = rpcscope("bench", "interleave", "--rounds", "2", "--seconds", "0.2", "--b-build", "clock", "--json",
                 timeout=300)
    r = json.loads(p.stdout)
    assert r["b_build"] == "clock" and all(len(w["p50_ns"]) == 2 for w in r["ways"])
    for w in r["ways"]:
        diffs = sorted((b - a) / 1e3 for a, b in w["p50_ns"])
        assert w["B_minus_A_us_median"] == pytest.approx((diffs[0] + diffs[1]) / 2, abs=1e-9), w
    assert not sh("pgrep", "-f", "rpc-client|rpc-server").stdout.split()
    assert capture_leftovers(pathlib.Path("/nonexistent")) == []


def test_bench_interleave_stopped_while_taking_turns_leaves_nothing(testbed, signal_when_ready):
    """SIGTERM while the two clients take turns (one of them stopped): the benchmark says it was
    interrupted, and no client or server is left, running or stopped."""
    proc = subprocess.Popen(RPCSCOPE + ["bench", "interleave", "--rounds", "2", "--seconds", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def taking_turns():
        return len(sh("pgrep", "-f", "bin/rpc-client").stdout.split()) == 2
    try:
        stdout, stderr = signal_when_ready(proc, taking_turns, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr, (proc.returncode, stderr)
    assert not sh("pgrep", "-f", "rpc-client|rpc-server").stdout.split()


def test_missing_perf_is_named_before_anything_starts(testbed, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for t in ("ip", "tc", "taskset", "setarch", "lttng", "lttng-sessiond", "babeltrace2", "pgrep", "git", "nft", "sh"):
        real = shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if real:
            (bindir / t).symlink_to(real)
    out = tmp_path / "run"
    p = subprocess.run(RPCSCOPE + ["capture", "--sizes", "0", "--kernel", "perf", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PATH": str(bindir)})
    assert p.returncode == 2 and "'perf' was not found" in p.stderr and "--kernel none" in p.stderr, p.stderr
    assert not out.exists() and capture_leftovers(out) == []


@pytest.fixture(scope="module")
def run(testbed, tmp_path_factory):
    sessiond_before = set(Sessiond.running())
    out = tmp_path_factory.mktemp("capture") / "run"
    p = rpcscope("capture", "--sizes", "0,4016", "--proc", "maxarg", "--transport", "udp,tcp",
                 "--calls", str(CALLS), "--warmup", str(WARMUP), "--kernel", "perf", "--calibration", "quick",
                 "--calibration-calls", "1000", "--deadline-seconds", "1", "--out", str(out), timeout=600)
    print(p.stdout)
    # lttng-sessiond is left as found (started and stopped again, or the running one left alone).
    assert set(Sessiond.running()) == sessiond_before
    return out


def test_run_directory_is_complete(run):
    m = json.loads((run / "manifest.json").read_text())
    assert m["format"] == 1 and m["complete"] and not m["interrupted"]
    assert m["kernel_collector"] == "perf" and m["testbed"]["kind"] == "local" and m["testbed"]["shared_kernel"]
    assert m["placement"] == "split" and m["wait"] == "select" and m["clock"] == "monotonic"
    assert set(m["hosts"]) == {CLIENT, SERVER}
    assert m["hosts"][CLIENT]["cpus"] != m["hosts"][SERVER]["cpus"]
    for h in m["hosts"].values():
        assert h["kernel"] and h["cpu_model"] and h["clocksource"]
    assert set(m["tools"]) >= {"lttng", "perf", "babeltrace2"}
    assert m["git_commit"]
    assert m["aslr"]["setting"] == "off" and "setarch -R" in m["aslr"]["how"], m["aslr"]
    assert m["aslr"]["kernel_randomize_va_space"] in (0, 1, 2)
    assert m["params"]["sizes"] == [0, 4016] and m["params"]["calls"] == CALLS
    assert set(m["calibration"]) == {CLIENT, SERVER}
    for cal in m["calibration"].values():
        assert cal["ust_event_ns"] is not None and "all" in cal["kernel_event_ns"]
    assert [c["id"] for c in m["cases"]] == ["udp-maxarg-0", "udp-maxarg-4016", "tcp-maxarg-0", "tcp-maxarg-4016"]
    # A deadline long past when the planned rounds end: they all ran, and no extra sweep did.
    for t, sw in m["sweeps"].items():
        assert sw["deadline_seconds"] == 1 and sw["ended"] in ("settled", "capture deadline"), (t, sw)
        assert sw["extra_rounds"] == 0 and len(sw["seconds"]) == DEFAULT_REPEATS, (t, sw)
        assert m["phase_seconds"][f"{t} sweeps"] >= sum(sw["seconds"]) - 0.5, (t, m["phase_seconds"])
    assert list(m["phase_seconds"]) == ["calibration", "udp sweeps", "udp finish", "tcp sweeps", "tcp finish"]
    for c in m["cases"]:
        d = run / c["dir"]
        for f in ("client-traced.json", "client-untraced.json"):
            r = json.loads((d / f).read_text())
            assert r["calls"] == CALLS and r["errors"] == 0 and r["size"] == c["size"], (c["id"], f)
            assert r["aslr"] == "off", (c["id"], f)     # rpc-client read its own personality
            assert sum(r["rtt_hist"]["counts"]) + r["rtt_hist"]["above"] == CALLS, (c["id"], f)
        # Every round's client summary and histogram, the kept round's the same as the case's files.
        rounds = json.loads((d / "rounds.json").read_text())
        assert rounds["format"] == "rpcscope-rounds/1" and rounds["kept_round"] == c["repeats"]["kept_round"]
        for kind in ("untraced", "traced"):
            got = rounds["kinds"][kind]
            assert [g["rtt_ns"]["p50"] for g in got] == c["repeats"][f"{kind}_p50_ns"], (c["id"], kind)
            assert [g["sleeps_per_call"] for g in got] == c["repeats"][f"{kind}_sleeps_per_call"], (c["id"], kind)
            kept_file = json.loads((d / f"client-{kind}.json").read_text())
            assert got[rounds["kept_round"]]["rtt_hist"] == kept_file["rtt_hist"], (c["id"], kind)
            # Every run timed its CPU's pace before and after its calls (rpc-client --pace-slices).
            assert [run_pace_ns(g) for g in got] == c["repeats"][f"{kind}_pace_ns"], (c["id"], kind)
            assert all(g["pace"]["before"]["slices"] == g["pace"]["after"]["slices"] == PACE_SLICES
                       and g["pace"]["cpu"] == kept_file["cpus"][0] for g in got), (c["id"], kind)
        assert c["traced"]["p50"] > 0 and c["untraced"]["p50"] > 0
        assert c["losses"] == {"ust_discarded": 0, "ust_lost_packets": 0, "kernel_lost": 0}, c
        assert not c["lossy"]
        assert c["events"]["ust"] > 0 and c["events"]["kernel"] > 0
        assert c["trace_bytes"]["ust"] > 0 and c["trace_bytes"]["kernel"] > 0
        assert set(c["pids"]) == {"server", "client"}
        # DEFAULT_REPEATS rounds in sweeps over each transport's sizes, each an untraced and a traced run
        # (no user-only runs unless asked: test_ftrace_capture); every kind of the kept round stands for
        # the case, and that round's traced run keeps its traces.
        rep, sw = c["repeats"], m["sweeps"][c["transport"]]
        n, kinds = DEFAULT_REPEATS, ("untraced", "traced")
        assert "ust_only" not in c and "ust_p50_ns" not in rep
        x, kept = rep["extra_rounds"], rep["kept_round"]
        assert 0 <= x <= MAX_EXTRA_ROUNDS and x == sw["extra_rounds"] and kept == sw["kept_by_case"][c["id"]], (rep, sw)
        assert sw["kept_straddle_pct"][c["id"]] >= 0.0
        if sw["settled"]:       # the sweep's round, less a kind's burst (else each size's round in one level)
            mine = {(c["id"], k): rep[f"{k}_p50_ns"] for k in kinds}
            assert (kept, rep["agreeing_rounds"]) == settled_rounds(mine, c["id"], sw["kept_round"],
                                                                    sw["agreeing_rounds"]), (rep, sw)
            assert set(rep["agreeing_rounds"]) <= set(sw["agreeing_rounds"])
        assert m["params"]["repeats"] == rep["rounds"] == n
        for kind, got in (("untraced", c["untraced"]), ("traced", c["traced"])):
            assert len(rep[f"{kind}_p50_ns"]) == n + x and got["p50"] == rep[f"{kind}_p50_ns"][kept], (kind, rep)
        assert sw["kept_round"] in sw["agreeing_rounds"] and kept in rep["agreeing_rounds"]
        assert all(sw["distance_pct"][sw["kept_round"]][q] <= SWEEP_AGREE_PCT for q in sw["agreeing_rounds"])
        # Extra sweeps only while too few rounds agreed.
        assert sw["settled"] == sweeps_settled(sw["agreeing_rounds"], n + x)
        if x:
            first = {(e["id"], k): e["repeats"][f"{k}_p50_ns"][:n] for e in m["cases"]
                     if e["transport"] == c["transport"] for k in kinds}
            assert not sweeps_settled(choose_sweep(first)[1], n), sw
        assert len(sw["seconds"]) == n + x and sw["cases"] == [i for i in (e["id"] for e in m["cases"])
                                                               if i.startswith(c["transport"] + "-")]
        # Each round runs every kind once, so that a change of the host's speed touches every kind alike.
        assert rep["order"] == [f"{k}-{r}" for r in range(n + x) for k in kinds], rep
        # Every run's sleeps per call (client and server), the kept round's as the case's path shape.
        for kind in kinds:
            sl = rep[f"{kind}_sleeps_per_call"]
            assert len(sl) == n + x and all(0 < v["client"] < 10 and 0 < v["server"] < 10 for v in sl), (kind, sl)
            assert all(0 <= v["client_ipi"] < 10 and 0 <= v["server_ipi"] < 10 for v in sl), (kind, sl)
            assert c["sleeps_per_call"][kind] == sl[kept], (kind, c["sleeps_per_call"])
        assert path_shape(c)["same"] in (True, False)
        assert not list(d.glob("repeat-*")) and not list(d.rglob("*.perf.data*")), c["id"]
    # Sweeps: round r of every size of a transport ran before round r + 1 of any (the servers' logs are
    # written as each run ends and kept with their times).
    for t in m["params"]["transports"]:
        ends = {}
        for c in m["cases"]:
            if c["transport"] == t:
                for f in (run / c["dir"]).glob("server-*-*.log"):
                    ends.setdefault(int(f.stem.rsplit("-", 1)[1]), []).append(f.stat().st_mtime)
        assert sorted(ends) == list(range(len(ends))) and len(ends) >= DEFAULT_REPEATS, (t, sorted(ends))
        assert all(max(ends[r]) <= min(ends[r + 1]) for r in range(len(ends) - 1)), t
    assert not (run / ".perf").exists()       # the capture's one perf leaves nothing behind
    assert m["calibration_in_situ"] == {"method": "per case", "complete": True, "user_only_runs": False}
    # The wake-up calibration ran on each role's CPU, woken from the other's, and gives unit costs.
    cpus = placement_cpus(m["params"]["placement"])
    for role, other in (("server", "client"), ("client", "server")):
        w = m["wake_calibration"][role]
        assert (w["receiver_cpu"], w["sender_cpu"]) == (cpus[role], cpus[other]), w
        assert w["points"][0]["busy"] and len(w["points"]) > 10, w["points"][:2]
    costs = run_wake_costs(m)
    assert set(costs) == {"client", "server"} and all(c["sleep_us"] > 0 for c in costs.values()), costs
    # The CPU speed checks: one before the calls and one after every sweep, on the testbed's CPUs.
    checks = m["cpu_speed"]["checks"]
    assert [c["when"] for c in checks] == ["start"] + [
        f"{t} sweep {r + 1}" for t in m["params"]["transports"]
        for r in range(len(m["sweeps"][t]["seconds"]))], [c["when"] for c in checks]
    assert all(sorted(x["cpu"] for x in c["cpus"]) == sorted(set(cpus.values())) for c in checks), checks[0]
    losses = cpu_losses(m)
    assert losses["errors"] == [] and all(0 <= x <= 100 for c in losses["cpus"].values() for x in c["lost_pct"])


def test_babeltrace_reads_every_trace_with_nothing_discarded(run):
    m = json.loads((run / "manifest.json").read_text())
    for c in m["cases"]:
        d = run / c["dir"]
        for sub in ("ust", "kernel"):
            p = sh("babeltrace2", str(d / sub), "-c", "sink.utils.counter", timeout=300)
            assert p.returncode == 0, (c["id"], sub, p.stderr[-1000:])
            last = p.stdout.strip().split("\n\n")[-1]
            assert re.search(r"^\s*0 Discarded event messages", last, re.M), (c["id"], sub, last)
            assert int(re.search(r"(\d+) Event messages", last).group(1)) == c["events"][sub]
        # The kernel clock class is aligned with the UST one: babeltrace2 merges both traces.
        p = sh("babeltrace2", str(d / "ust"), str(d / "kernel"), "-c", "sink.utils.counter", timeout=300)
        assert p.returncode == 0, p.stderr[-1000:]


def test_analysis_in_workers_equals_the_analysis_in_one_process(run, tmp_path):
    """`rpcscope analyze` spreads the cases over forked workers (analysis/workers.py): on this real
    capture with its per-case probe calibration, the step tables, the RTTs and probe.json are those
    of the whole analysis in one process, and no worker is left afterwards."""
    got = {}
    for workers in (1, 2):
        r = load_run(run)
        r.out_dir = tmp_path / f"out-{workers}"
        r.cache_dir = r.out_dir / "cache"
        res = analyze(r, workers=workers)
        probe = json.loads((r.out_dir / "probe.json").read_text())
        got[workers] = (res["steps"], res["rtt"], probe,
                        {cid: x.rows["RTT"].corrected.tolist() for cid, x in res["_rpcs"].items()})
    # The calibration was walked (in the workers): a point per case (two cases per transport are too
    # few to leave one out, so no per-case costs here).
    assert sum(len(t["points"]) for t in probe["transports"].values()) == 4, probe
    assert got[1] == got[2]
    # Nearly every call is rebuilt whole (the rest: waits that did not happen, counted per reason);
    # before the softirq that wakes a sleeper could begin ahead of its switch out, 4016-byte TCP
    # calls were 2 % complete.
    for x in got[1][1]:
        assert x["complete_rpcs"] >= 0.8 * x["rpcs"], (x["case"], x["incomplete_by_first_missing_step"])
    me = str(os.getpid())
    kids = [p for p in pathlib.Path("/proc").glob("[0-9]*/stat")
            if p.exists() and p.read_text().rsplit(")", 1)[1].split()[1] == me
            and p.read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not kids, kids


def test_kernel_trace_holds_both_hosts_syscalls_and_every_packet(run):
    m = json.loads((run / "manifest.json").read_text())
    devs = {h["role"]: h["ifname"] for h in m["hosts"].values()}
    # The lean event set (the default): packets on the hosts' own interfaces only, no start of transmit
    # beside the hand-off, no sched_wakeup beside sched_waking.
    assert m["params"]["kernel_events"] == "lean" and sorted(m["testbed"]["devices"]) == sorted(devs.values())
    for c in m["cases"]:
        events = kernel_events(run / c["dir"] / "kernel")
        names = {e for e, _, _ in events}
        assert not names & set(cperf.FULL_ONLY_EVENTS), (c["id"], sorted(names))
        assert {d for _, _, d in events if d} <= set(devs.values()), c["id"]
        by_pid = collections.Counter((e, pid) for e, pid, _ in events)
        total = CALLS + WARMUP
        cp, sp = c["pids"]["client"], c["pids"]["server"]
        sends = ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg")
        recvs = ("syscalls:sys_enter_recvfrom", "syscalls:sys_enter_recvmsg", "syscalls:sys_enter_read")
        for pid, who in ((cp, "client"), (sp, "server")):
            assert sum(by_pid[(e, pid)] for e in sends) >= total, (c["id"], who, "send")
            assert sum(by_pid[(e, pid)] for e in recvs) >= total, (c["id"], who, "receive")
        dev = collections.Counter((e, d) for e, _, d in events if d)
        if c["transport"] == "udp":
            # IP packets per message: the request carries size + 8 (args) + 80 (header) + 8 (UDP).
            req_packets = -(-(c["size"] + 8 + 80 + 8) // 1480)
            want_req, want_rep = total * req_packets, total
        else:
            want_req = want_rep = total
        assert dev[("net:net_dev_xmit", devs["client"])] >= want_req, (c["id"], dev)
        assert dev[("net:netif_receive_skb", devs["server"])] >= want_req, (c["id"], dev)
        assert dev[("net:net_dev_xmit", devs["server"])] >= want_rep, (c["id"], dev)
        assert dev[("net:netif_receive_skb", devs["client"])] >= want_rep, (c["id"], dev)
        # Every packet sent on one host's device is received on the other's.
        assert dev[("net:net_dev_xmit", devs["client"])] == dev[("net:netif_receive_skb", devs["server"])]
        assert dev[("net:net_dev_xmit", devs["server"])] == dev[("net:netif_receive_skb", devs["client"])]


def test_second_capture_into_the_run_refuses(run):
    before = (run / "manifest.json").read_text()
    p = rpcscope("capture", "--sizes", "0", "--calls", "10", "--out", str(run), check=False)
    assert p.returncode == 2 and "already exists" in p.stderr and "--replace" in p.stderr, p.stderr
    assert (run / "manifest.json").read_text() == before


@pytest.mark.parametrize("kernel", ["perf", "ftrace", "ftrace --turns",
                                    "ftrace --turns --kernel-only-runs --kernel-only-traced-runs "
                                    "--kernel-only-doubled-runs"])
def test_interrupted_capture_leaves_nothing_running(testbed, tmp_path, kernel, signal_when_ready):
    out = tmp_path / "interrupted"
    # The capture is started with SIGINT ignored, as a background job of a script gets it: it must
    # still take SIGINT as an interrupt. One round: it is interrupted in its first traced run anyway, and
    # the disk check (capture.check_disk) would ask for every round's worth of these long runs (40 GB
    # with the default five and four extra).
    proc = subprocess.Popen(RPCSCOPE + ["capture", "--sizes", "0,4016", "--calls", "200000", "--warmup", "10",
                                        "--repeats", "1", "--kernel", *kernel.split(), "--calibration", "none",
                                        "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    def recording():
        # In the middle of a traced run: the capture's perf (or tracefs instance) and the run's UST session record.
        kernel_on = (out / ".perf" / "kernel.perf.data").exists() if kernel == "perf" else bool(ftrace_instances())
        # and, with doubled kernel-only runs, a second pair of a kernel-only run's instances
        kernel_only = "kernel-only" not in kernel or any("-ko-" in n and n.endswith("-p2") for n in ftrace_instances())
        return kernel_on and kernel_only and any(n.startswith("rpcs-capture-") for n in clttng.session_names())

    try:
        stdout, stderr = signal_when_ready(proc, recording, signal.SIGINT)
    finally:
        if proc.poll() is None:
            proc.terminate()                   # SIGTERM: the capture still cleans up after itself
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["interrupted"] and not m["complete"]
    assert capture_leftovers(out) == []
    assert not list(out.rglob("*.perf.data*")) and not (out / ".perf").exists()   # no perf data kept
    assert not list(out.rglob("repeat-*"))     # nor an incomplete case's rounds
    # nor kernel-only runs of any kind, kept only with every one of them
    assert not any((out / kind).exists() for kind in ("kernelonly", "kernelonly-traced", "kernelonly-doubled"))
