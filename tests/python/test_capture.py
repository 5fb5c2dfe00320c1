"""`rpcscope capture` on the local testbed, for real: perf kernel traces, LTTng-UST traces, both hosts.

Captures sizes 0 and 4016 of maxarg over UDP and TCP with the perf collector,
then checks the run directory against the contract in collectors/README.md:
every file present, babeltrace2 reads every trace, nothing discarded, the
kernel trace holds the client's and the server's send and receive syscalls and
the transmit and receive of every packet on both hosts' devices. An
interrupted capture must leave nothing running. Bad input fails before
anything starts.

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
import sys
import time

import pytest

from rpcscope.collectors import lttng as clttng, perf as cperf
from rpcscope.collectors.capture import PACE_SLICES, run_pace_ns
from rpcscope.output import UserError

REPO = pathlib.Path(__file__).resolve().parents[2]
RPCSCOPE = [sys.executable, "-c", "import sys; from rpcscope.cli import main; sys.exit(main())"]
STATE_DIR = pathlib.Path("/run/rpcscope/testbed")
CLIENT, SERVER = "rpcs-client", "rpcs-server"
CALLS, WARMUP = 300, 50

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.tracing,
    pytest.mark.skipif(os.geteuid() != 0, reason="capture needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "perf", "lttng", "babeltrace2")),
                       reason="needs iproute2, openssh-server, perf, lttng-tools, babeltrace2 (make bootstrap)"),
]


def rpcscope(*args, timeout=300, check=True):
    p = subprocess.run(RPCSCOPE + list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check:
        assert p.returncode == 0, f"rpcscope {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def sh(*argv, timeout=60):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def leftovers(run_dir):
    """What a capture could leave running: processes in the hosts' namespaces other than their sshd,
    perf recording into the run, LTTng sessions of a capture."""
    found = []
    sshd = set()
    for h in (CLIENT, SERVER):
        pidf = STATE_DIR / "hosts" / h / "sshd.pid"
        if pidf.exists():
            sshd.add(pidf.read_text().split()[0])
    for h in (CLIENT, SERVER):
        for pid in sh("ip", "netns", "pids", h).stdout.split():
            try:
                cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if pid not in sshd and state != "Z" and "sshd" not in cmd:
                found.append(f"{h}: {pid} {cmd}")
    for pid in sh("pgrep", "-f", f"perf record.*{run_dir}").stdout.split():
        found.append(f"perf {pid}")
    found += [f"lttng session {n}" for n in clttng.session_names() if n and n.startswith("rpcs-capture-")]
    found += [f"tracefs instance {n}" for n in _ftrace_instances()]
    return found


@pytest.fixture(scope="module")
def testbed():
    """The testbed, up for this module only; one testbed test module at a time on this machine."""
    from rpcscope.testbed import held_by_tests
    with held_by_tests(wait=1200):
        if STATE_DIR.exists():
            pytest.skip("a testbed is already up on this machine; this test would replace it "
                        "(run `rpcscope testbed down` first)")
        try:
            # Bad input before anything exists: the testbed is down.
            p = rpcscope("capture", "--sizes", "0", "--out", "/tmp/rpcscope-capture-never", check=False)
            assert p.returncode == 2 and "testbed is down" in p.stderr and "rpcscope testbed up" in p.stderr, p.stderr
            assert not pathlib.Path("/tmp/rpcscope-capture-never").exists()
            rpcscope("testbed", "up", "--json", timeout=180)
            yield
        finally:
            rpcscope("testbed", "down", check=False, timeout=180)


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
    from rpcscope.collectors.capture import aslr_prefix
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
    assert leftovers(pathlib.Path("/nonexistent")) == []


def test_bench_interleave_runs_both_ways_and_leaves_nothing(testbed):
    """`rpcscope bench interleave`: two identical pairs one after the other and taking turns, every
    round's p50s and the spread of their ratio; no process left, none stopped."""
    from rpcscope.bench_interleave import WAYS, pair_spread
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
    assert leftovers(pathlib.Path("/nonexistent")) == []


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
    assert not out.exists() and leftovers(out) == []


def test_lttng_kernel_command_lines():
    """The LTTng-kernel collector (lttng-modules cannot load here): its command lines as documented."""
    cmds = clttng.lttng_kernel_commands("s", "/o/kernel", ["net:net_dev_xmit", "net:netif_receive_skb",
                                                            "sched:sched_switch", "sched:sched_waking",
                                                            "irq:softirq_entry", "skb:skb_copy_datagram_iovec",
                                                            "qdisc:qdisc_dequeue"],
                                        ["sendto", "recvfrom"], ["rpcs-c0", "rpcs-s0"], ["rpc-client", "rpc-server"])
    assert cmds[0] == ["create", "s", "--output=/o/kernel"]
    assert cmds[1][:2] == ["enable-channel", "--kernel"] and "--discard" in cmds[1] and cmds[1][-1] == "rpcs_kernel"
    assert cmds[2] == ["add-context", "--kernel", "--session=s", "--channel=rpcs_kernel",
                       "--type", "pid", "--type", "tid", "--type", "procname"]
    assert cmds[3] == ["enable-event", "--kernel", "--session=s", "--channel=rpcs_kernel", "--syscall",
                       "sendto,recvfrom",
                       '--filter=$ctx.procname == "rpc-client" || $ctx.procname == "rpc-server"']
    by_events = {c[4]: c[5] for c in cmds[4:]}
    assert by_events["net_dev_xmit,netif_receive_skb"] == '--filter=name == "rpcs-c0" || name == "rpcs-s0"'
    assert by_events["sched_switch"] == ('--filter=prev_comm == "rpc-client" || prev_comm == "rpc-server" || '
                                         'next_comm == "rpc-client" || next_comm == "rpc-server"')
    assert by_events["sched_waking"] == '--filter=comm == "rpc-client" || comm == "rpc-server"'
    assert by_events["irq_softirq_entry"] == "--filter=vec == 3"
    assert "skb_copy_datagram_iovec" in by_events
    assert not any("qdisc" in " ".join(c) for c in cmds)   # lttng-modules has no qdisc probes
    # Every subcommand and option is one lttng 2.13 documents (its own --help says so).
    for c in cmds:
        helptext = subprocess.run(["lttng", c[0], "--help"], capture_output=True, text=True, timeout=30).stdout
        for opt in c[1:]:
            if opt.startswith("--"):
                assert opt.split("=")[0] in helptext, (c[0], opt)


def test_ust_buffers_hold_every_event():
    sub, num = clttng.ust_buffer_size(10_200)
    assert num == 8 and sub & (sub - 1) == 0
    assert sub * num >= 10_200 * 2 * clttng.UST_EVENTS_PER_CALL * clttng.UST_EVENT_BYTES


def _kernel_events(kdir):
    """(event name, perf_pid, device name or None) of every event of a perf CTF trace."""
    p = sh("babeltrace2", str(kdir), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = []
    for line in p.stdout.splitlines():
        m = re.search(r"\) (\S+): .*perf_pid = (-?\d+)", line)
        if not m:
            continue
        dev = re.search(r'\bname = "([^"]*)"', line)
        out.append((m.group(1), int(m.group(2)), dev.group(1) if dev else None))
    return out


@pytest.fixture(scope="module")
def run(testbed, tmp_path_factory):
    from rpcscope.collectors.capture import Sessiond
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
    from rpcscope.collectors.capture import (
        DEFAULT_REPEATS,
        MAX_EXTRA_ROUNDS,
        SWEEP_AGREE_PCT,
        choose_sweep,
        settled_rounds,
        sweeps_settled,
    )
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
        from rpcscope.analysis.run import path_shape
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
    from rpcscope.analysis.wakeup import run_wake_costs
    from rpcscope.collectors.capture import placement_cpus
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
    from rpcscope.analysis.cpuspeed import cpu_losses
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
    from rpcscope.analysis.run import load_run
    from rpcscope.analysis.steps import analyze
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
        events = _kernel_events(run / c["dir"] / "kernel")
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


@pytest.mark.parametrize("kernel", ["perf", "ftrace", "ftrace --turns"])
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
        kernel_on = (out / ".perf" / "kernel.perf.data").exists() if kernel == "perf" else bool(_ftrace_instances())
        return kernel_on and any(n.startswith("rpcs-capture-") for n in clttng.session_names())

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
    assert leftovers(out) == []
    assert not list(out.rglob("*.perf.data*")) and not (out / ".perf").exists()   # no perf data kept
    assert not list(out.rglob("repeat-*"))     # nor an incomplete case's rounds


def _ftrace_instances():
    return sorted(p.name for p in (cperf.TRACEFS / "instances").glob("rpcscope-*"))


def test_ftrace_collector_records_every_packet_and_the_calls_rebuild(testbed, tmp_path):
    """--kernel ftrace (collectors/ftrace.py): the same events as perf, in perf's CTF dialect; the
    kernel trace holds both hosts' syscalls and every packet, the analysis rebuilds the calls whole,
    and the case's tracefs instance is gone afterwards."""
    from rpcscope.analysis.steps import analyze
    out = tmp_path / "ftrace"
    before = _ftrace_instances()
    rpcscope("capture", "--sizes", "0,4016", "--transport", "udp,tcp", "--calls", "300", "--warmup", "30",
             "--kernel", "ftrace", "--calibration", "quick", "--calibration-calls", "500", "--repeats", "1",
             "--user-only-runs", "--kernel-events", "full", "--clock-reads", "--out", str(out), timeout=600)
    assert _ftrace_instances() == before
    m = json.loads((out / "manifest.json").read_text())
    # --user-only-runs: every round also ran with user events only, kept for the record.
    assert m["calibration_in_situ"] == {"method": "per case", "complete": True, "user_only_runs": True}
    for c in m["cases"]:
        assert c["repeats"]["order"] == ["untraced-0", "clock-0", "ust-0", "traced-0"], c["repeats"]
        assert c["ust_only"]["p50"] == c["repeats"]["ust_p50_ns"][0] > 0, c
    assert m["complete"] and m["kernel_collector"] == "ftrace" and m["kernel_clock_aligned_to_ust"]
    assert all("all" in h["kernel_event_ns"] for h in m["calibration"].values()), m["calibration"]
    devs = {h["role"]: h["ifname"] for h in m["hosts"].values()}
    for c in m["cases"]:
        assert c["losses"]["kernel_lost"] == 0 and c["events"]["kernel"] > 0, c
        events = _kernel_events(out / c["dir"] / "kernel")
        assert len(events) == c["events"]["kernel"]
        total = 300 + 30
        by_pid = collections.Counter((e, pid) for e, pid, _ in events)
        for pid in (c["pids"]["client"], c["pids"]["server"]):
            assert sum(by_pid[(e, pid)] for e in ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg")) >= total
        dev = collections.Counter((e, d) for e, _, d in events if d)
        assert dev[("net:net_dev_xmit", devs["client"])] == dev[("net:netif_receive_skb", devs["server"])] >= total
        assert dev[("net:net_dev_xmit", devs["server"])] == dev[("net:netif_receive_skb", devs["client"])] >= total
        # --kernel-events full: every device of the path, the bridge's side of each veth pair too, with
        # its start of transmit, and the scheduler's sched_wakeup.
        assert sorted(m["testbed"]["devices"]) == sorted({d for _, _, d in events if d}), (c["id"], dev)
        for d in m["testbed"]["devices"]:
            assert dev[("net:net_dev_start_xmit", d)] == dev[("net:net_dev_xmit", d)] > 0, (c["id"], d, dev)
        assert sum(1 for e, _, _ in events if e == "sched:sched_wakeup") > 0, c["id"]
        assert not list((out / c["dir"]).rglob("kernel.ftrace"))          # the raw dump is converted, then gone
    res = analyze(out, write=False)
    for x in res["rtt"]:
        assert x["complete_rpcs"] >= 0.8 * x["rpcs"], (x["case"], x["incomplete_by_first_missing_step"])
    # --clock-reads: the clock build in every round (its p50 in repeats; a ring of marks, the anchor's),
    # then one run of each case that keeps every mark, compressed, every measured call's user-mark steps
    # timed; a clock read costs the call far less than a tracepoint.
    for c in m["cases"]:
        cr = c["clock_reads"]
        assert set(cr["files"]) == {"client", "server"} and cr["client_p50_ns"] > 0, cr
        assert cr["marks_from"] == "a run after the rounds that keeps every mark", cr
        assert c["repeats"]["clock_p50_ns"][0] > 0 and c["sleeps_per_call"]["clock"]["client"] > 0.9, c["repeats"]
        assert all((out / c["dir"] / f).is_file() for f in cr["files"].values())
        assert not list((out / c["dir"]).glob("clock-*.txt"))                   # only the .gz are kept
        assert not (out / c["dir"] / "clock-marks").exists()
        assert cr["client_p50_ns"] < c["traced"]["p50"], (c["id"], cr, c["traced"])
    by = {(r["case"], r["step"]): r for r in res["steps"]}
    for x in res["rtt"]:
        # Every mark of 330 calls, not a ring's 256.
        assert x["clock_reads"]["dropped"] == 0 and x["clock_reads"]["marks"] > 330 * 10, x["clock_reads"]
        for step in ("C1", "C5", "S4", "RTT"):
            r = by[(x["case"], step)]
            assert 0 < r["clock_reads_median_us"] < r["median_us"], (x["case"], step, r)
        assert by[(x["case"], "C8")]["clock_reads_median_us"] is None          # kernel-bounded: no user marks
    p = rpcscope("capture", "--inventory", str(REPO / "ansible" / "inventories" / "local" / "hosts.yml"),
                 "--kernel", "ftrace", "--sizes", "0", "--out", str(tmp_path / "remote"), check=False)
    assert p.returncode == 2 and "local testbed only" in p.stderr, p.stderr


def test_capture_taking_turns_traces_every_call_of_its_turns(testbed, tmp_path):
    """--turns: every size and kind of a round at once, in turns of --turn-calls; each traced run's
    tracefs instance records only its turns, yet holds every call's packets and syscalls; one round is
    kept for every size, the rounds' speeds recorded; nothing is left behind. A --deadline-seconds that
    no round fits cuts the rounds asked (5) to MIN_TURNS_ROUNDS (4), and says so."""
    from rpcscope.analysis.run import level_p50_ns
    from rpcscope.analysis.steps import analyze
    from rpcscope.collectors.capture import MIN_TURNS_ROUNDS
    out = tmp_path / "turns"
    before = _ftrace_instances()
    p = rpcscope("capture", "--sizes", "0,4016", "--transport", "udp,tcp", "--calls", "300", "--warmup", "30",
                 "--kernel", "ftrace", "--calibration", "quick", "--calibration-calls", "500", "--repeats", "5",
                 "--deadline-seconds", "1", "--clock-reads", "--turns", "--turn-calls", "10", "--out", str(out),
                 timeout=600)
    assert "taking turns of 10 calls" in p.stdout, p.stdout
    assert MIN_TURNS_ROUNDS == 4 and p.stdout.count("4 rounds (of 5 asked: the capture's deadline, 1 s") == 2, p.stdout
    assert _ftrace_instances() == before and leftovers(out) == []
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and m["params"]["turns"] and m["params"]["turn_calls"] == 10
    total = 300 + 30
    for t in ("udp", "tcp"):
        sw = m["sweeps"][t]
        assert sw["ended"] == "capture deadline" and sw["rounds"] == 4 and sw["rounds_asked"] == 5, sw
        assert sw["extra_rounds"] == 0 and sw["agreeing_rounds"] == [0, 1, 2, 3] and len(sw["seconds"]) == 4
        assert sw["turns"]["runs_per_round"] == 6 and len(sw["turns"]["round_speed"]) == 4       # 2 sizes x 3 kinds
        assert set(sw["kept_by_case"].values()) == {sw["kept_round"]}                            # one round for all
    devs = {h["role"]: h["ifname"] for h in m["hosts"].values()}
    for c in m["cases"]:
        rep = c["repeats"]
        assert rep["kept_round"] == m["sweeps"][c["transport"]]["kept_round"]
        # 1 + 30 + 300 calls in turns of 10: 34 turns a run, every run of every round
        assert all(n == [34] * 4 for k, n in rep["turns"].items() if k.endswith("_turns")), rep["turns"]
        assert level_p50_ns(c, "untraced") > 0 and c["sleeps_per_call"]["untraced"]["client"] > 0.5
        assert c["losses"]["kernel_lost"] == 0 and not c["lossy"] and c["events"]["kernel"] > 0, c
        events = _kernel_events(out / c["dir"] / "kernel")
        by_pid = collections.Counter((e, pid) for e, pid, _ in events)
        for pid in (c["pids"]["client"], c["pids"]["server"]):
            assert sum(by_pid[(e, pid)] for e in ("syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg")) >= total
        dev = collections.Counter((e, d) for e, _, d in events if d)
        assert dev[("net:net_dev_xmit", devs["client"])] == dev[("net:netif_receive_skb", devs["server"])] >= total
    res = analyze(out, write=False)
    for x in res["rtt"]:
        assert x["complete_rpcs"] >= 0.9 * x["rpcs"], (x["case"], x["incomplete_by_first_missing_step"])
        assert x["took_turns"], x            # the model lets a step's cost fall with the bytes (slope_floor)


def test_capture_through_ansible_on_the_testbed_inventory(testbed, tmp_path):
    """ansible/capture.yml, as on real hosts: each host its own session and perf; traces fetched per host.
    (On this testbed the hosts share a kernel and a session daemon, so each host's traces also hold the
    other's events; real hosts do not.)"""
    inv = REPO / "ansible" / "inventories" / "local" / "hosts.yml"
    out = tmp_path / "remote"
    try:
        d = rpcscope("deploy", "--json", timeout=900)
        assert json.loads(d.stdout)["ok"], d.stdout[-3000:]
        rpcscope("capture", "--inventory", str(inv), "--kernel", "perf", "--sizes", "0", "--calls", "200",
                 "--warmup", "20", "--out", str(out), timeout=900)
    finally:
        # Stop what deploy started (its lttng-sessiond), as test_testbed does.
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
               "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), "teardown.yml"],
                       cwd=REPO / "ansible", env=env, capture_output=True, timeout=300)
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and m["testbed"]["kind"] == "inventory" and not m["testbed"]["shared_kernel"]
    assert set(m["hosts"]) == {CLIENT, SERVER} and all(h["kernel"] and h["cpu_model"] for h in m["hosts"].values())
    (case,) = m["cases"]
    cdir = out / case["dir"]
    for f in (f"client-traced-{CLIENT}.json", f"client-untraced-{CLIENT}.json"):
        r = json.loads((cdir / f).read_text())
        assert r["calls"] == 200 and r["errors"] == 0 and r["aslr"] == "off"     # capture_aslr's default
    for h in (CLIENT, SERVER):
        for sub in (f"ust-{h}", f"kernel-{h}"):
            p = sh("babeltrace2", str(cdir / sub), "-c", "sink.utils.counter", timeout=300)
            assert p.returncode == 0 and re.search(r"[1-9]\d* Event messages", p.stdout), (sub, p.stderr)
    assert case["losses"] == {"ust_discarded": 0, "ust_lost_packets": 0, "kernel_lost": 0}
    assert leftovers(out) == []


@pytest.mark.skipif(not pathlib.Path("/sys/kernel/tracing/events/syscalls/sys_enter_getppid").is_dir(),
                    reason="needs tracefs with syscall tracepoints (the capture mounts it; make test does)")
def test_persistent_perf_splits_runs_into_files(tmp_path):
    """The capture's one perf (PerfRecorder persistent=True): events only while enabled, each dump holds
    exactly the events since the previous one, and stop leaves no perf and no stray file."""
    from rpcscope.collectors import perf
    comm = pathlib.Path("/proc/self/comm").read_text().strip()
    work = tmp_path / "perf"
    rec = perf.PerfRecorder(work, work / "k.data", ["syscalls:sys_enter_getppid"], [], procnames=(comm,),
                            persistent=True)
    rec.start()
    try:
        got = []
        for before, during in ((5, 7), (3, 11)):
            for _ in range(before):
                os.getppid()                      # disabled: not recorded
            rec.enable()
            for _ in range(during):
                os.getppid()
            rec.disable()
            got.append(rec.dump(tmp_path / f"run-{len(got)}.perf.data"))
    finally:
        rec.stop()
    assert [perf.stats(p)["samples"].get("syscalls:sys_enter_getppid") for p in got] == [7, 11]
    assert not rec.alive() and not list(work.glob("k.data*")) and not list(work.glob("*.fifo"))


def test_wait_files_closed_waits_for_the_holder_and_names_it(tmp_path):
    """A destroyed LTTng session's trace is read only once no process holds its files (the capture
    destroys sessions without waiting for the session daemon): a holder is waited for, or named."""
    f = tmp_path / "trace" / "stream_0"
    f.parent.mkdir()
    f.touch()
    holder = subprocess.Popen(["sh", "-c", f"exec 3>>{f}; sleep 0.3"])
    try:
        time.sleep(0.05)
        with pytest.raises(UserError, match=str(holder.pid)):
            clttng.wait_files_closed(tmp_path / "trace", timeout=0.05)
        t0 = time.monotonic()
        clttng.wait_files_closed(tmp_path / "trace", timeout=5)
        assert time.monotonic() - t0 > 0.1 and holder.wait(timeout=5) == 0
    finally:
        holder.kill()
        holder.wait()
    clttng.wait_files_closed(tmp_path / "nothing-here", timeout=0)


def test_clock_reads_without_the_clock_build_or_its_marks(tmp_path, monkeypatch):
    """capture --clock-reads without the clock build (make TRACE=clock) is refused before anything runs,
    saying how to make it; a kept round whose clock run left one role's marks unwritten is recorded as the
    case's clock_reads error, no mark file is left, and no exception stops the capture."""
    import types

    from rpcscope.collectors import (
        capture as cap,
        options,  # the preflight checks' module
    )
    monkeypatch.setattr(options, "CLOCK_BIN", tmp_path / "no-clock-build")
    monkeypatch.setattr(options.os, "geteuid", lambda: 0)
    monkeypatch.setattr(options.idle.IdlePolicy, "check", lambda self: None)
    monkeypatch.setattr(options, "require_tool", lambda name, fix: None)
    import rpcscope.testbed
    monkeypatch.setattr(rpcscope.testbed, "health", lambda st: [])
    with pytest.raises(UserError, match=r"no-clock-build/rpc-server is missing; build it with `make TRACE=clock`"):
        options.preflight({"clock_reads": True, "aslr": "off", "kernel": "none"}, {"hosts": []})
    case = {"id": "udp-maxarg-0", "dir": "cases/udp-maxarg-0", "size": 0, "calls": 10, "warmup": 1}
    rdir = tmp_path / case["dir"] / "repeat-0"
    rdir.mkdir(parents=True)
    (rdir / "clock-client.txt").write_text("rpcscope-clockmarks/1 marks 0 dropped 0\n")
    fake = types.SimpleNamespace(out=tmp_path)
    run = {"res": {"rtt_ns": {"p50": 1000}}, "dir": rdir}
    cap.Capture.keep_clock_marks(fake, case, run)
    assert "server wrote no marks" in case["clock_reads"]["error"], case
    assert not list((tmp_path / case["dir"]).glob("clock-*"))
    (rdir / "clock-server.txt").write_text("rpcscope-clockmarks/1 marks 0 dropped 0\n")
    cap.Capture.keep_clock_marks(fake, case, run)
    assert case["clock_reads"] == {"build": "clock (make TRACE=clock)", "client_p50_ns": 1000, "every_round": True,
                                   "files": {"client": "clock-client.txt.gz", "server": "clock-server.txt.gz"},
                                   "marks_from": "a run after the rounds that keeps every mark",
                                   "rounds_keep": "a ring of the latest marks (rpc/clockmark.h CLOCKMARK_RING_SLOTS)"}
    assert sorted(f.name for f in (tmp_path / case["dir"]).glob("clock-*")) == ["clock-client.txt.gz",
                                                                              "clock-server.txt.gz"]
    # The run that keeps every mark failed: its error is the case's, and its marks are gone.
    cap.Capture.keep_clock_marks(fake, case, {"error": "the clock build's run that keeps every mark failed: boom"})
    assert case["clock_reads"] == {"error": "the clock build's run that keeps every mark failed: boom"}
    assert not list((tmp_path / case["dir"]).glob("clock-*"))
    # The rounds' clock runs keep a ring of marks; the run after them every mark.
    assert cap.clock_env(rdir / "m.txt", ring=True) == ["env", f"RPCS_CLOCKMARK_OUT={rdir / 'm.txt'}",
                                                        "RPCS_CLOCKMARK_RING=1"]
    assert cap.clock_env(rdir / "m.txt") == ["env", f"RPCS_CLOCKMARK_OUT={rdir / 'm.txt'}"]
    assert cap.clock_env(None) == []
