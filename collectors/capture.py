"""`rpcscope capture` on the local testbed: user and kernel traces of chosen payload sizes.

For each (transport, size) case, in every round (Capture.sweeps: round r of
every size of a transport before round r + 1 of any):
  1. untraced: the TRACE=0 build's server and client (or the traced build with
     no session recording, --untraced stopped), warm-up then the measured calls;
  2. user events only (the in-situ probe calibration), then traced: an
     LTTng-UST session recording the rpc provider of exactly the case's two
     processes (lttng track --vpid), and for the traced run the kernel collector
     (ftrace, perf record -a -k mono with per-event filters, or LTTng's kernel
     tracer), the same warm-up and calls; discarded events and lost packets read back.
Then from the kept round (choose_sweep), per case: the traced run's kernel trace
converted to CTF, its clock class aligned with the UST trace's, events and bytes
counted, the other rounds' traces deleted, the manifest rewritten.

The two namespace hosts share one kernel and one filesystem: one lttng-sessiond
and one kernel collector serve both (the manifest says so). Processes started
here run in their own session (Ctrl-C reaches only rpcscope), are tracked by
pid and stopped by pid when the run ends, however it ends.

The capture's parts, one job each: collectors/options.py (parameters and preflight checks),
processes.py (the RPC programs, their processes, the measuring tools), tracing.py (the tracers),
sweeps.py (a transport's rounds), rounds.py (the figures that keep a round), manifest.py (the
records; rpcscope/rundir.py names the run directory's files). This module runs them in order.
"""
import contextlib
import gzip
import json
import shutil
import subprocess
import time
import uuid

from rpcscope.interrupts import interruptible, uninterrupted
from rpcscope.output import UserError
from rpcscope.rundir import (
    KERNEL_ONLY_DOUBLED_RUN,
    KERNEL_ONLY_RUN,
    KERNEL_ONLY_TRACED_RUN,
    MANIFEST_FORMAT,
    SWEEP_SETTLE_ROUNDS,
    TARGET_JSON,
    RunDir,
    case_factors,
    sweeps_settled,
    sweeps_summary,
    unsettled_transports,
)

from . import ftrace, idle, leftovers, lttng, perf, target
from .manifest import (
    base_manifest,
    case_record,
    clocksource,
    cpu_model,
    git_commit,
    now,
    repeats_record,
    rounds_json,
    tool_versions,
)
from .options import (
    ASLR_SETTINGS,
    BASE_PORT,
    CLOCK_BIN,
    CPUSPEED_SECONDS,
    DEFAULT_REPEATS,
    MAX_MSG,
    MIN_TURNS_ROUNDS,
    NOTRACE_BIN,
    PACE_SLICES,
    PROCS,
    SERVER_SAFETY_S,
    TRACE_BIN,
    TURN_CALLS,
    TURN_CALLS_RANGE,
    TURNS_REPEATS,
    WAKECAL_SECONDS,
    case_id,
    case_kinds,
    check_deadline_seconds,
    check_disk,
    check_extra_sweep_seconds,
    check_sizes,
    choose_kernel_collector,
    disk_needed,
    fragments,
    in_situ,
    lttng_kernel_available,
    parse_sizes,
    parse_transports,
    preflight,
    prepare_out,
    proc_max_size,
    require_tool,
    validate,
)
from .processes import (
    Processes,
    RpcRuns,
    Sessiond,
    aslr_prefix,
    aslr_record,
    bt_count,
    clock_env,
    dir_bytes,
    ipi_counts,
    ipi_delta,
    placement_cpus,
    rpc_bindir,
    tool_json,
    wait_ready,
)
from .rounds import (
    EXTRA_SWEEP_SECONDS,
    FINISH_SECONDS_PER_CASE,
    KIND_ORDER,
    LEVEL_GAP,
    MAX_EXTRA_ROUNDS,
    STRADDLE_LEVEL_PCT,
    SWEEP_AGREE_PCT,
    choose_sweep,
    cpu_speed_summary,
    fastest_round,
    level_rounds,
    most_central,
    round_speeds,
    rtt_record,
    run_levels,
    run_pace_ns,
    settled_rounds,
    sleeps_per_call,
    straddle_pct,
    sweep_distances,
    sweeps_end,
    turn_buffer_kb,
    turns_kept_round,
    turns_spread_pct,
)
from .sweeps import Sweeps, TurnRun
from .tracing import Tracing

FORMAT = MANIFEST_FORMAT

# Every name the capture's callers and tests take from here (its parts live in the modules above).
__all__ = [
    "ASLR_SETTINGS", "CLOCK_BIN", "Capture", "DEFAULT_REPEATS", "EXTRA_SWEEP_SECONDS",
    "FINISH_SECONDS_PER_CASE", "FORMAT", "KIND_ORDER", "LEVEL_GAP", "MAX_EXTRA_ROUNDS", "MAX_MSG",
    "MIN_TURNS_ROUNDS", "PACE_SLICES", "PROCS", "SERVER_SAFETY_S", "STRADDLE_LEVEL_PCT", "SWEEP_AGREE_PCT",
    "SWEEP_SETTLE_ROUNDS", "TRACE_BIN", "TURNS_REPEATS", "TURN_CALLS", "TURN_CALLS_RANGE", "TurnRun",
    "aslr_prefix", "aslr_record", "case_factors", "case_id", "check_deadline_seconds",
    "check_disk", "check_extra_sweep_seconds", "check_sizes", "choose_sweep", "clock_env", "clocksource",
    "cpu_model", "disk_needed", "fastest_round", "fragments", "git_commit", "ipi_counts", "ipi_delta",
    "level_rounds", "lttng_kernel_available", "most_central", "parse_sizes", "parse_transports", "preflight",
    "prepare_out", "proc_max_size", "require_tool", "round_speeds", "rpc_bindir", "run_levels", "run_pace_ns",
    "settled_rounds", "sleeps_per_call", "straddle_pct", "sweep_distances", "sweeps_end", "sweeps_settled",
    "sweeps_summary", "tool_versions", "turn_buffer_kb", "turns_kept_round", "turns_spread_pct",
    "unsettled_transports", "validate", "wait_ready",
]


# ---------------------------------------------------------------- the capture

class Capture(RpcRuns, Tracing, Sweeps):
    """One capture into out_dir: calibration, then every transport's rounds and cases, the manifest
    rewritten as each completes; every process, session and tracer it started is stopped however it
    ends."""

    def __init__(self, params, out_dir, testbed_state, progress=None, log=print, after_case=None):
        self.p = params
        self.after_case = after_case   # called as after_case(self, case) once a case is complete
        self.rundir = RunDir(out_dir)
        self.out = self.rundir.path
        self.tb = testbed_state
        self.progress = progress
        self.log = log
        self.procs = Processes()
        self.sessiond = Sessiond()
        self.sessions = []             # lttng sessions created and not yet destroyed
        self.ust_dirs = {}             # UST session -> its output directory
        self.perf = None
        self.case_perf = None          # the traced runs' perf (kernel_start) until kernel_release ends it
        self.case_ftrace = None        # or its ftrace instance (--kernel ftrace), alike
        self.calib_ftrace = None       # the loopback calibration's ftrace instance while it records
        self._perf_out = None          # where the running traced run's kernel.perf.data goes
        self.stopped_perf = []         # stopped perf recorders whose data is not yet converted or deleted
        self.hosts = {h["role"]: h for h in testbed_state["hosts"]}
        self.cpus = placement_cpus(params["placement"])
        self.kernel = choose_kernel_collector(params["kernel"])
        if params.get("turns") and params["kernel"] == "auto" and self.kernel == "lttng" and ftrace.available():
            self.kernel = "ftrace"           # an LTTng kernel session cannot pause for the untraced turns
        if params.get("turns") and self.kernel not in ("ftrace", "none"):
            raise UserError(f"--turns: the kernel collector here is {self.kernel}, which cannot be switched off for "
                            f"the turns of the runs that are not traced; mount tracefs (make bootstrap) for ftrace, "
                            f"or use --kernel none")
        if params.get("kernel_only_runs") and not (params.get("turns") and self.kernel == "ftrace"):
            raise UserError("--kernel-only-runs: the kernel-only runs take turns with the traced ones and record "
                            "through tracefs; add --turns, with --kernel ftrace (or auto)")
        self.kernel_only_cases = {}    # {kind: the kernel-only runs' target cases} (--kernel-only-runs; Sweeps)
        self.tag = uuid.uuid4().hex[:8]
        self.manifest = None
        self.port = BASE_PORT
        self.last_ipis = None          # run_pair's IPIs per CPU role while its client ran (ipi_delta)

    # ------------------------------------------------------------ helpers
    def step(self, desc):
        if self.progress is not None:
            self.progress.set_description(desc)

    def advance(self):
        if self.progress is not None:
            self.progress.update(1)

    def ns(self, role):
        return self.hosts[role]["name"]

    def addr(self, role):
        return self.hosts[role]["address"]

    def devices(self):
        """The devices whose packets the kernel collector records: each host's own interface, and with
        --kernel-events full the bridge's side of its veth pair as well (the hop in between)."""
        devs = []
        for role in ("client", "server"):
            h = self.hosts[role]
            devs += [h["ifname"], h["peer_ifname"]] if self.kernel_events == "full" else [h["ifname"]]
        return devs

    @property
    def kernel_events(self):
        return self.p.get("kernel_events", "lean")

    def server_wait(self, transport):
        w = self.p["wait"]
        return "recv" if (w == "recv" and transport == "udp") else "select"

    def next_port(self):
        self.port += 1
        return self.port

    def write_manifest(self):
        self.rundir.write_manifest(self.manifest)


    # ------------------------------------------------------------ calibration
    def calibrate(self):
        """Per host, on the host's loopback, client and server on the host's CPU: the cost of one user
        event (traced vs not, divided by events per call) and of one kernel event of each kind."""
        out = {}
        calls, warmup = self.p["calibration_calls"], max(100, self.p["calibration_calls"] // 10)
        cdir = self.out / "calibration"
        cdir.mkdir(exist_ok=True)
        for role in ("client", "server"):
            host = self.ns(role)
            cpu = self.cpus[role]
            cpus = {"client": cpu, "server": cpu}
            kw = dict(server_ns=host, client_ns=host, server_addr="127.0.0.1", cpus=cpus)
            total = calls + warmup

            def run(tag, hook=None):
                res, _ = self.run_pair("udp", 0, calls, warmup, True, cdir, f"{host}-{tag}", hook, **kw)
                return res["rtt_ns"]["p50"]

            self.step(f"calibration {host}: baseline")
            base = [run("base")]
            udir = cdir / f"{host}-ust"
            self.step(f"calibration {host}: user events")
            p50_ust = run("ust", self.trace_hook(udir, total, 1, {}))
            n_ust, _, _ = bt_count(udir)
            shutil.rmtree(udir, ignore_errors=True)
            result = {"ust_event_ns": round((p50_ust - base[0]) / max(1e-9, n_ust / total), 1),
                      "ust_events_per_call": round(n_ust / total, 2), "kernel_event_ns": {},
                      "kernel_events_per_call": {}, "baseline_p50_ns": base[0], "calls": calls}
            if self.kernel in ("perf", "ftrace") and self.p["calibration"] != "none":
                avail = [e for e in perf.event_set(self.p["executors"], detail=self.kernel_events)
                         if perf.tracepoint_available(e)]
                groups = [[e] for e in avail] if self.p["calibration"] == "full" else [avail]
                for evs in groups:
                    label = evs[0] if len(evs) == 1 else "all"
                    data = cdir / f"{host}-{label.replace(':', '_')}.perf.data"
                    written = []

                    def k_hook(spid, cpid, evs=evs, data=data, written=written):
                        if self.kernel == "ftrace":
                            rec = self.calib_ftrace = ftrace.FtraceRecorder(evs, ["lo"], buffer_kb=16384)
                            rec.start()
                            rec.enable()

                            def stop():
                                rec.disable()
                                written.append(rec.written())
                                rec.stop()
                            return stop
                        rec = perf.PerfRecorder(cdir, data, evs, ["lo"])
                        self.perf = rec
                        rec.start()
                        return rec.stop

                    self.step(f"calibration {host}: kernel {label}")
                    p50 = run(label.replace(":", "_"), k_hook)
                    self.perf = self.calib_ftrace = None
                    n = written[0] if written else sum(perf.stats(data)["samples"].values())
                    data.unlink(missing_ok=True)
                    base.append(run("base"))  # the baseline drifts: measure it around each
                    b = sorted(base)[len(base) // 2]
                    per_call = n / total
                    result["kernel_events_per_call"][label] = round(per_call, 2)
                    result["kernel_event_ns"][label] = round((p50 - b) / per_call, 1) if per_call >= 0.5 else None
                result["baseline_p50_ns"] = sorted(base)[len(base) // 2]
            out[host] = result
            self.advance()
        shutil.rmtree(cdir, ignore_errors=True)
        return out

    def wake_calibration(self):
        """What a wake-up costs each role's CPU (rpc-wakecal, rpc/wakecal.h), for the model's other-path
        terms (analysis/wakeup.py): {role: rpc-wakecal's JSON with the reader on that role's CPU and the
        sender on the other's}, in the server's namespace, under the capture's idle policy. Half a second
        a role. A role it could not run for holds {"error": why}: the model then has no other-path
        terms, and the capture goes on."""
        out = {}
        if self.cpus["client"] == self.cpus["server"]:
            return {"skipped": "client and server share a CPU: a wake-up within one CPU takes no interrupt"}
        binary = NOTRACE_BIN / "rpc-wakecal"
        for role, other in (("server", "client"), ("client", "server")):
            self.step(f"wake-up calibration: reader on the {role}'s CPU {self.cpus[role]}")
            argv = ["ip", "netns", "exec", self.ns("server"), str(binary), "--sender-cpu", str(self.cpus[other]),
                    "--receiver-cpu", str(self.cpus[role]), "--max-seconds", str(WAKECAL_SECONDS), "--json"]
            try:
                out[role] = tool_json(argv, WAKECAL_SECONDS + 10)
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                out[role] = {"error": f"{binary.name}: {e} (run `make` for the binary; the model gets no "
                                      f"other-path terms)"}
        return out

    def cpu_speed_check(self, when):
        """How long the testbed's CPUs took for a fixed piece of work, slice after slice (rpc-cpuspeed,
        rpc/cpuspeed.h), appended to the manifest's cpu_speed.checks as {"when", "cpus": [cpu_speed_summary]}
        or {"when", "error"}: before the wake-up calibration and after every sweep, ~0.1 s each. A VM's
        CPU runs only while the hypervisor gives it a core, which its guest cannot see otherwise; the
        run summary and the goals' verdict say how much of their time the CPUs lost (analysis/cpuspeed.py).
        A check that fails is recorded as such and the capture goes on."""
        binary = NOTRACE_BIN / "rpc-cpuspeed"
        cpus = sorted(set(self.cpus.values()))
        argv = [str(binary), "--cpu", ",".join(map(str, cpus)), "--max-seconds", str(CPUSPEED_SECONDS), "--json"]
        try:
            measured = tool_json(argv, CPUSPEED_SECONDS + 10)["cpus"]
            check = {"when": when, "cpus": [cpu_speed_summary(c) for c in measured]}
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            check = {"when": when, "error": f"{binary.name}: {e} (run `make` for the binary)"}
        speed = self.manifest.setdefault("cpu_speed", {"tool": "rpc-cpuspeed", "checks": []})
        speed["checks"].append(check)
        return check

    # ------------------------------------------------------------ the cases of a transport
    def new_case(self, transport, size):
        case = case_record(transport, self.p, size)
        self.rundir.case_dir(case["id"]).mkdir(parents=True)
        self.manifest["cases"].append(case)
        return case

    def run_transport(self, transport):
        """Every size of one transport: the rounds in sweeps (sweeps()), then each case from the kept
        round: its untraced and traced runs (and user-only ones, with --user-only-runs), the traced one's
        traces kept, converted and counted, the other rounds' traces deleted. Calls after_case for each
        case once it is complete."""
        cases = [self.new_case(transport, size) for size in self.p["sizes"]]
        self.write_manifest()
        n = self.p.get("repeats", 1)
        kinds = case_kinds(self.p, self.kernel)
        with self.phase(f"{transport} sweeps"):
            runs, order, by_case, record = self.sweeps(transport, cases, kinds, n)
        self.manifest.setdefault("sweeps", {})[transport] = record
        with self.phase(f"{transport} finish"):
            for case in cases:
                self.finish_case(case, runs[case["id"]], order[case["id"]], *by_case[case["id"]], record)
                if self.after_case:
                    self.after_case(self, case)

    @contextlib.contextmanager
    def phase(self, name):
        """Time a part of the capture into the manifest's phase_seconds (where its time went)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.manifest.setdefault("phase_seconds", {})[name] = round(time.monotonic() - t0, 1)

    def clock_marks_run(self, case):
        """One run of the clock build that keeps every mark, after the case's rounds, whose marks
        keep_clock_marks keeps: the step tables' clock-read column. The rounds' clock runs keep a ring of
        the latest marks only (clock_env), for the probe effect's anchor: keeping every mark streams ~0.5
        KB of stores a call into 32 MiB on each side, which costs TCP 24096 ~0.35 us more than TCP 0,
        and the anchor needs a clock build that pays for the bytes as the untraced run does
        (analysis/MODEL.md). A run that fails is the case's clock_reads error, and
        the capture goes on."""
        rdir = self.out / case["dir"] / "clock-marks"
        rdir.mkdir(parents=True, exist_ok=True)
        self.kernel_release()
        self.step(f"{case['id']}: clock build, every mark")
        clock_out = {role: rdir / f"clock-{role}.txt" for role in ("client", "server")}
        try:
            res, pids = self.run_pair(case["transport"], case["size"], case["calls"], case["warmup"], False, rdir,
                                      "clock-marks", clock_out=clock_out)
            run = {"res": res, "pids": pids, "dir": rdir}
        except UserError as e:
            run = {"error": f"the clock build's run that keeps every mark failed: {e}"}
        self.advance()
        return run

    def keep_clock_marks(self, case, run):
        """A clock-build run's marks (make TRACE=clock: each step mark one clock read into memory, ~25 ns,
        where a tracepoint costs the call ~200; clock_marks_run), compressed, beside the case's traces
        (cases/ID/clock-client.txt.gz, clock-server.txt.gz), for the step tables' clock-read column
        (analysis/clockreads.py). Marks that are not there are recorded as the case's clock_reads error
        and the capture goes on: they are a check of the step costs. The probe effect's anchor
        (analysis/probe.py) takes every round's p50 (repeats.clock_p50_ns), which the client reports
        whatever became of the marks."""
        cdir = self.out / case["dir"]
        files = {role: cdir / f"clock-{role}.txt.gz" for role in ("client", "server")}
        try:
            if run.get("error"):
                raise UserError(run["error"])
            for role, dst in files.items():
                src = run["dir"] / f"clock-{role}.txt"
                if not src.exists():
                    raise UserError(f"the clock build's {role} wrote no marks to {src.name}")
                with src.open("rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
                    shutil.copyfileobj(f, g)
            case["clock_reads"] = {"build": "clock (make TRACE=clock)", "client_p50_ns": run["res"]["rtt_ns"]["p50"],
                                   "files": {role: f.name for role, f in files.items()}, "every_round": True,
                                   "marks_from": "a run after the rounds that keeps every mark",
                                   "rounds_keep": "a ring of the latest marks (rpc/clockmark.h CLOCKMARK_RING_SLOTS)"}
        except (UserError, OSError) as e:      # OSError: the marks could not be read or compressed
            for f in files.values():
                f.unlink(missing_ok=True)
            case["clock_reads"] = {"error": str(e)}

    def finish_case(self, case, runs, order, kept, agreeing, record):
        """The case from its kept round (agreeing: the rounds in that round's level), traces of the
        others deleted."""
        cid, cdir = case["id"], self.out / case["dir"]
        calls, warmup = case["calls"], case["warmup"]
        traced_build = self.p["untraced"] == "stopped"
        res_u = runs["untraced"][kept]["res"]
        (cdir / "client-untraced.json").write_text(json.dumps(res_u, indent=2) + "\n")
        case["untraced"] = rtt_record(res_u)
        case["untraced_build"] = "trace (no session recording)" if traced_build else "notrace (TRACE=0)"
        self.step(f"{cid}: convert and count")
        kept_run = runs["traced"][kept]
        n_k, k_lost, per_event = self.keep_run(kept_run, cdir)
        if "clock" in runs:
            self.keep_clock_marks(case, self.clock_marks_run(case))
        self.discard(cdir)
        res_t, pids, got = kept_run["res"], kept_run["pids"], kept_run["got"]
        ust_dir = cdir / "ust"
        (cdir / "client-traced.json").write_text(json.dumps(res_t, indent=2) + "\n")
        case["pids"] = pids
        case["traced"] = rtt_record(res_t)
        case["repeats"] = repeats_record(record, runs, order, kept, agreeing)
        case["sleeps_per_call"] = {k: v[kept].get("sleeps") for k, v in runs.items()}
        (cdir / "rounds.json").write_text(json.dumps(rounds_json(runs, kept)) + "\n")
        if "ust" in runs:
            case["ust_only"] = rtt_record(runs["ust"][kept]["res"])
        n_ust, d_ust, dp_ust = bt_count(ust_dir)
        total = calls + warmup
        losses = {"ust_discarded": got["ust"]["discarded_events"] + d_ust,
                  "ust_lost_packets": got["ust"]["lost_packets"] + dp_ust, "kernel_lost": k_lost}
        case.update({
            "events": {"ust": n_ust, "kernel": n_k},
            "events_per_call": {"ust": round(n_ust / total, 2), "kernel": round(n_k / total, 2)},
            "kernel_events_by_name": per_event,
            "kernel_event_set": got.get("kernel_events", []),
            "losses": losses,
            "lossy": any(losses.values()),
            "trace_bytes": {"ust": dir_bytes(ust_dir), "kernel": dir_bytes(cdir / "kernel")},
        })
        case["trace_bytes_per_1000_calls"] = round((case["trace_bytes"]["ust"] + case["trace_bytes"]["kernel"])
                                                   * 1000 / total)
        for f in cdir.glob("server-*.log"):
            if f.stat().st_size == 0:
                f.unlink()
        case["complete"] = True
        self.write_manifest()
        self.advance()
        return case

    # ------------------------------------------------------------ the whole run
    def base_manifest(self):
        return base_manifest(self.p, self.tb, self.hosts, self.cpus, self.kernel, self.devices(), self.server_wait)

    def run(self):
        self.started = time.monotonic()          # --deadline-seconds counts from here (seconds_left)
        # A killed capture's server, perf, sessions and tracefs instances would hold ports and cost the
        # calls: removed first, and said (collectors/leftovers.py).
        removed = leftovers.clean()
        self.out.mkdir(parents=True)
        # What this capture starts, recorded before it starts it; removed at its clean end.
        self.state = leftovers.CaptureState(self.out)
        self.state.open()
        self.manifest = self.base_manifest()
        if removed:
            self.say_removed("found before it started", removed)
        self.write_manifest()
        # SIGTERM and Ctrl-C interrupt, and the capture cleans up (rpcscope/interrupts.py).
        with interruptible():
            return self._run()

    def _run(self):
        idle_policy = idle.IdlePolicy(self.p.get("idle", "poll"))
        try:
            idle_policy.__enter__()
            self.sessiond.ensure()
            with self.phase("calibration"):
                if self.p["calibration"] != "none":
                    self.manifest["calibration"] = self.calibrate()
                    self.write_manifest()
                self.cpu_speed_check("start")
                self.manifest["wake_calibration"] = self.wake_calibration()
            self.write_manifest()
            if in_situ(self.p, self.kernel):
                # In situ: the analysis solves the cases' traced minus untraced p50s for the cost of
                # each event class on the path (analysis/probe.py).
                self.manifest["calibration_in_situ"] = {"method": "per case", "complete": True,
                                                        "user_only_runs": "ust" in case_kinds(self.p, self.kernel)}
                self.write_manifest()
            for transport in self.p["transports"]:
                self.run_transport(transport)
            if self.p.get("kernel_only_runs"):
                self.write_kernel_only_runs()
            self.manifest["complete"] = True
        except KeyboardInterrupt:
            self.manifest["interrupted"] = True
            raise
        finally:
            with uninterrupted():
                self.cleanup()
                idle_policy.close()
                self.manifest["finished"] = now()
                self.write_manifest()
                self.state.close()
        return self.manifest

    def write_kernel_only_runs(self):
        """Each kind of kernel-only runs' target.json, which makes kernelonly/ (and kernelonly-traced/,
        kernelonly-doubled/) target runs of their own (`rpcscope analyze RUN/kernelonly`, `rpcscope
        crosscheck RUN`)."""
        made_by = {"kernelonly": "--kernel-only-runs: the untraced build's runs taking turns with the traced ones",
                   "kernelonly-traced": "--kernel-only-runs --kernel-only-traced-runs: the traced build's runs, its "
                                        "user tracepoints recording, taking turns with the traced ones (its probe "
                                        "calibration's neighbour: the same round's user-only run, --user-only-runs)",
                   "kernelonly-doubled": "--kernel-only-runs --kernel-only-doubled-runs: the untraced build's runs, "
                                         "every kernel event recorded twice (a second pair of tracefs instances, "
                                         "its rings discarded), taking turns with the traced ones"}
        for kind in self.kernel_only_kinds():
            cases = self.kernel_only_cases.get(kind, [])
            rounds = max((c.rounds for c in cases), default=1)
            doc = target.target_record("reference", self.p["proc"], self.p["calls"], self.p["warmup"], rounds,
                                       cases, made_by=f"rpcscope capture --turns {made_by[kind]}")
            self.kernel_only_run_dir(kind).joinpath(TARGET_JSON).write_text(json.dumps(doc, indent=1))
        self.manifest["kernel_only_run"] = KERNEL_ONLY_RUN
        if KERNEL_ONLY_TRACED_RUN in self.kernel_only_kinds():
            self.manifest["kernel_only_traced_run"] = KERNEL_ONLY_TRACED_RUN
        if KERNEL_ONLY_DOUBLED_RUN in self.kernel_only_kinds():
            self.manifest["kernel_only_doubled_run"] = KERNEL_ONLY_DOUBLED_RUN

    def cleanup(self):
        if self.perf:
            self.perf.kill()
            self.stopped_perf.append(self.perf)
            self.perf = None
        if self.case_perf:
            self.case_perf.kill()           # disabled since the last traced run: nothing left to keep
            self.case_perf = None
            shutil.rmtree(self.out / ".perf", ignore_errors=True)
        for rec in (self.case_ftrace, self.calib_ftrace):
            if rec:
                rec.stop()
        self.case_ftrace = self.calib_ftrace = None
        for rec in self.stopped_perf:            # an interrupted case's rounds: nothing to convert
            rec.data.unlink(missing_ok=True)
        self.stopped_perf = []
        self.procs.stop_all()
        for name in list(self.sessions):
            lttng.run_lttng(["destroy", name], check=False)
            self.sessions.remove(name)
            leftovers.forget("lttng_sessions", name)
        self.sessiond.restore()
        for f in self.out.rglob("perf-*.fifo"):
            f.unlink(missing_ok=True)
        if not (self.manifest or {}).get("complete"):  # kernel-only runs are kept only with every one of them
            for d in self.rundir.kernel_only_runs():
                shutil.rmtree(d, ignore_errors=True)
        for case in (self.manifest or {}).get("cases", []):
            if not case.get("complete"):           # interrupted before its round was kept: nothing to keep
                self.discard(self.out / case["dir"])
