"""`rpcscope capture` and `rpcscope bench capture`: traces of chosen payload sizes, and their cost."""
import argparse
import os
import pathlib
import shutil
import statistics
import sys

from rpcscope import ROOT, testbed
from rpcscope.output import UserError, emit_json, table

from . import capture as cap, perf, remote

EPILOG = """examples:
  rpcscope testbed up && make && make TRACE=0
  rpcscope capture --sizes 0,1392,4016,8032 --proc maxarg --transport udp --calls 2000 --warmup 200 \\
      --kernel auto --out runs/maxarg-udp
  rpcscope capture --sizes 0,4016 --proc echo --transport udp,tcp --placement same --wait recv --out runs/x
  rpcscope capture --sizes 0,1392,1393,4016 --holdout 1393 --out runs/y   1393 corrects no other size
  rpcscope capture --sizes 0 --kernel-events full --out runs/z   also start of transmit, sched_wakeup, bridge side
  rpcscope capture --sizes 0,4016,24096 --clock-reads --turns --out runs/t   every size and kind
                                                       of a round at once, in turns of 20 calls
  rpcscope capture ... --out runs/x --replace          overwrite an earlier run of that name
  rpcscope capture ... --json                          print the manifest as JSON

The run directory (runs/NAME/manifest.json, cases/<transport>-<proc>-<size>/
{client-traced.json, client-untraced.json, ust/, kernel/}) is described in
collectors/README.md. Ctrl-C stops every session and process and marks the
run interrupted. On real hosts: ansible/capture.yml (see collectors/README.md).
"""

BENCH_EPILOG = """examples:
  rpcscope bench capture                                 sizes 0,1392,4016,8032, UDP, 10000 calls each
  rpcscope bench capture --calls 2000 --sizes 0,4016 --transport udp,tcp --json

Reports, per size: traced and untraced p50 RTT, a plain rpc-client run's p50
(same build, placement and waiting, no capture around it), user and kernel
events per call, lost events, and trace bytes on disk per 1000 calls.
"""


def add_common(ap, default_calls, default_sizes):
    ap.add_argument("--sizes", default=default_sizes,
                    help=f"payload sizes in bytes, comma-separated (default {default_sizes})")
    ap.add_argument("--proc", default="maxarg", help="procedure (default maxarg): " + ", ".join(cap.PROCS))
    ap.add_argument("--transport", default="udp", help="udp, tcp or udp,tcp (default udp)")
    ap.add_argument("--calls", type=int, default=default_calls,
                    help=f"measured calls per size (default {default_calls})")
    ap.add_argument("--warmup", type=int, default=200,
                    help="warm-up calls per size, traced but not measured (default 200)")
    ap.add_argument("--kernel", choices=("auto", "lttng", "perf", "ftrace", "none"), default="auto",
                    help="kernel collector (default auto: LTTng's kernel tracer where lttng-modules is loaded, else "
                         "ftrace, a tracefs instance of its own, an eighth of perf's cost per event here; else perf)")
    ap.add_argument("--placement", choices=("split", "same"), default="split",
                    help="split: each host's processes on their own CPU, as on two machines (default); "
                         "same: both hosts on one CPU")
    ap.add_argument("--wait", choices=("select", "recv", "busy"), default="select",
                    help="how the client waits for the reply (the server uses select, or recv on UDP with recv)")
    ap.add_argument("--idle", choices=("poll", "os"), default="poll",
                    help="poll: idle CPUs spin (PM QoS /dev/cpu_dma_latency = 0) so a wake-up costs what it "
                         "would on a machine without deep C-states (default); os: they halt, as the OS chooses")
    ap.add_argument("--aslr", choices=cap.ASLR_SETTINGS, default="off",
                    help="off: rpc-server and rpc-client run with address-space layout randomization off "
                         "(setarch -R), so every run of a build has the same addresses and the layout adds no "
                         "spread between runs (default); on: the kernel's policy (rpcscope bench layout compares)")
    ap.add_argument("--kernel-events", choices=perf.KERNEL_EVENT_SETS, default="lean",
                    help="lean: the kernel events the analysis needs, packets on each host's own interface (default); "
                         "full: also each device's start of transmit and sched_wakeup, and on the local testbed the "
                         "bridge's side of each veth pair (9 more events a UDP null call, all on its round-trip path)")
    ap.add_argument("--executors", type=int, default=0, help="server executor threads; 0 = inline (default)")
    ap.add_argument("--untraced", choices=("notrace", "stopped"), default="notrace",
                    help="untraced calls with the TRACE=0 build (default) or the traced build with no session")
    ap.add_argument("--calibration", choices=("full", "quick", "none"), default="full",
                    help="per host: cost of a user event, and of each kernel event (full) or of all together (quick)")
    ap.add_argument("--repeats", type=int, default=cap.DEFAULT_REPEATS,
                    help="local testbed: rounds of untraced and traced runs of every size, in sweeps over "
                         "the sizes; the round most others agree with is kept for every size (default "
                         f"{cap.DEFAULT_REPEATS}; one run's p50 can differ from the next identical one's by 10-25%%)")
    ap.add_argument("--extra-sweep-seconds", type=float, default=cap.EXTRA_SWEEP_SECONDS,
                    help="local testbed: while fewer than 3 rounds agree, more sweeps of the sizes are made (at "
                         f"most {cap.MAX_EXTRA_ROUNDS}), but no more per transport than fit in this many seconds "
                         f"(default {cap.EXTRA_SWEEP_SECONDS:g}; 0: none)")
    ap.add_argument("--deadline-seconds", type=float, default=None, metavar="S",
                    help="local testbed: make no extra sweep that would leave the capture unfinished S seconds "
                         "after it started, with the later transports' sweeps and every case's finish still to "
                         "come (each estimated; the planned --repeats always run); `rpcscope run` sets it from "
                         "its --max-seconds (default: no deadline)")
    ap.add_argument("--user-only-runs", action="store_true",
                    help="local testbed, with a calibration: add a run with user events only to every round, which "
                         "records what a user event costs with no kernel event recorded (probe.json "
                         "ust_alone_event_ns); the correction does not use it, and each round takes half as long again")
    ap.add_argument("--clock-reads", action="store_true",
                    help="local testbed: in every round, one more run with the clock build (make "
                         "TRACE=clock: each step mark one clock read into memory); its RTT per round, and the "
                         "kept round's step times, which the step tables set beside the probe-corrected ones")
    ap.add_argument("--turns", action="store_true",
                    help="local testbed, kernel ftrace or none: run every size and kind of a round at once, taking "
                         "turns of --turn-calls (each client calls only in its turns, the traced ones' tracefs "
                         "instances "
                         "record only in theirs), so that Measured, the traced runs and every size share the host's "
                         "moments; one round is kept for every size, and no extra sweeps are made")
    ap.add_argument("--kernel-only-runs", action="store_true",
                    help="with --turns: in every round, one more run of each case, the untraced build recorded from "
                         "kernel events alone in its turns (as `run --target reference` records it), kept in "
                         "RUN/kernelonly/, for `rpcscope crosscheck RUN`: both builds' steps from the same moments")
    ap.add_argument("--kernel-only-traced-runs", action="store_true",
                    help="with --kernel-only-runs: one more run of each case a round, the traced build recorded from "
                         "kernel events alone with its user tracepoints recording (RUN/kernelonly-traced/): what the "
                         "user tracepoints add to each step (`rpcscope crosscheck RUN`, column user +). Its UST "
                         "session disturbs the round's other runs (analysis/TARGET.md): take the cross-check's "
                         "verdict from a capture without it")
    ap.add_argument("--kernel-only-doubled-runs", action="store_true",
                    help="with --kernel-only-runs: one more run of each case a round, the untraced build with every "
                         "kernel event recorded twice (RUN/kernelonly-doubled/): where one more recording of the "
                         "kernel events lands, interval by interval (`rpcscope crosscheck RUN`, column kernel +)")
    ap.add_argument("--turn-calls", type=int, default=cap.TURN_CALLS, metavar="N",
                    help=f"with --turns: the calls of a turn (default {cap.TURN_CALLS})")
    ap.add_argument("--calibration-calls", type=int, default=3000,
                    help="calls per loopback calibration run (default 3000; the in-situ calibration uses --calls "
                         "and --warmup)")
    ap.add_argument("--keep-perf-data", action="store_true", help="keep perf.data next to the kernel CTF")
    ap.add_argument("--replace", action="store_true", help="replace an existing run directory of that name")
    ap.add_argument("--json", action="store_true", help="print the manifest as JSON")


def params_from(args):
    p = {
        "sizes": cap.parse_sizes(args.sizes), "proc": args.proc,
        "transports": cap.parse_transports(args.transport), "calls": args.calls, "warmup": args.warmup,
        "kernel": args.kernel, "placement": args.placement, "wait": args.wait, "idle": args.idle, "aslr": args.aslr,
        "kernel_events": args.kernel_events, "executors": args.executors,
        "untraced": args.untraced, "calibration": args.calibration, "calibration_calls": args.calibration_calls,
        "repeats": args.repeats, "extra_sweep_seconds": args.extra_sweep_seconds,
        "deadline_seconds": args.deadline_seconds,
        "user_only_runs": args.user_only_runs, "keep_perf_data": args.keep_perf_data,
        "clock_reads": args.clock_reads, "turns": args.turns, "turn_calls": args.turn_calls,
        "kernel_only_runs": args.kernel_only_runs, "kernel_only_traced_runs": args.kernel_only_traced_runs,
        "kernel_only_doubled_runs": args.kernel_only_doubled_runs,
        "replace": args.replace,
        "holdout": cap.parse_sizes(args.holdout, "--holdout") if getattr(args, "holdout", None) else [],
    }
    stray = sorted(set(p["holdout"]) - set(p["sizes"]))
    if stray:
        raise UserError(f"--holdout {','.join(map(str, stray))}: not among --sizes; a held-out size is captured too")
    if args.executors < 0 or args.executors > 64:
        raise UserError(f"--executors {args.executors}: use 0 (inline) to 64")
    if p["user_only_runs"] and (not cap.in_situ(p, p["kernel"]) or getattr(args, "inventory", None)):
        raise UserError("--user-only-runs: the local testbed's in-situ calibration makes them, which needs a "
                        "calibration and a kernel collector; drop --calibration none, --kernel none or --inventory")
    if p["clock_reads"] and getattr(args, "inventory", None):
        raise UserError("--clock-reads: the local testbed only (it runs this checkout's build/clock); drop --inventory")
    if p["kernel_only_runs"] and not p["turns"]:
        raise UserError("--kernel-only-runs: the kernel-only runs take turns with the traced ones; add --turns")
    if p["kernel_only_traced_runs"] and not p["kernel_only_runs"]:
        raise UserError("--kernel-only-traced-runs: the traced build's kernel-only runs are set beside the untraced "
                        "build's; add --turns --kernel-only-runs")
    if p["kernel_only_doubled_runs"] and not p["kernel_only_runs"]:
        raise UserError("--kernel-only-doubled-runs: the doubled kernel-only runs are set beside the kernel-only "
                        "runs; add --turns --kernel-only-runs")
    if p["turns"] and getattr(args, "inventory", None):
        raise UserError("--turns: the local testbed only (one kernel switches every tracer); drop --inventory")
    if not 1 <= args.repeats <= 15:
        raise UserError(f"--repeats {args.repeats}: use 1 to 15 rounds per size")
    if args.calibration_calls < 100:
        raise UserError(f"--calibration-calls {args.calibration_calls}: use at least 100")
    cap.validate(p)
    return p


def _progress(total, disable):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="step", file=sys.stderr, disable=disable, leave=False,
                bar_format="{desc:<40} {bar} {n_fmt}/{total_fmt} [{elapsed}]")


def do_capture(p, out, quiet=False, inventory=None, after_case=None, extra_steps=0):
    if inventory:
        cap.require_tool("babeltrace2", "install babeltrace2 on the control node (make bootstrap does)")
        out = cap.prepare_out(out, p["replace"])
        p["out"], p["inventory"] = str(out), str(inventory)
        bar = _progress(len(p["sizes"]) * len(p["transports"]) * 3, disable=quiet or None)
        try:
            return remote.run(p, out, inventory, progress=bar), None
        finally:
            if bar is not None:
                bar.close()
    st = testbed.load_state()
    cap.preflight(p, st)
    cap.check_disk(p, out)
    out = cap.prepare_out(out, p["replace"])
    p["out"] = str(out)
    kinds = len(cap.case_kinds(p, cap.choose_kernel_collector(p["kernel"])))
    per_case = kinds * p["repeats"] + 1 + (1 if p.get("clock_reads") else 0)    # the rounds, convert, clock marks
    total = len(p["sizes"]) * len(p["transports"]) * per_case + (2 if p["calibration"] != "none" else 0) + extra_steps
    bar = _progress(total, disable=quiet or None)
    c = cap.Capture(p, out, st, progress=bar, after_case=after_case)
    try:
        return c.run(), c
    finally:
        if bar is not None:
            bar.close()


def rows_of(manifest):
    rows = []
    for c in manifest["cases"]:
        if not c.get("complete"):
            rows.append({"case": c["id"], "traced_p50_us": "INCOMPLETE"})
            continue
        rows.append({
            "case": c["id"],
            "traced_p50_us": c["traced"]["p50"] / 1e3, "untraced_p50_us": c["untraced"]["p50"] / 1e3,
            "ust_ev/call": c["events_per_call"]["ust"], "kernel_ev/call": c["events_per_call"]["kernel"],
            "lost": c["losses"]["ust_discarded"] + c["losses"]["ust_lost_packets"] + c["losses"]["kernel_lost"],
            "KB/1000 calls": c["trace_bytes_per_1000_calls"] / 1e3,
            "lossy": "LOSSY" if c["lossy"] else "no",
        })
    return rows


COLUMNS = ["case", "traced_p50_us", "untraced_p50_us", "ust_ev/call", "kernel_ev/call", "lost", "KB/1000 calls",
           "lossy"]


def cmd_capture(args):
    p = params_from(args)
    try:
        manifest, _ = do_capture(p, args.out, quiet=args.json, inventory=args.inventory)
    except KeyboardInterrupt:
        print(f"rpcscope capture: interrupted; every session and process was stopped; {args.out} is marked "
              f"incomplete (interrupted)", file=sys.stderr)
        return 130
    if args.json:
        emit_json(manifest)
        return 0
    cpus = ", ".join(f"{n} {h['cpus']}" for n, h in manifest["hosts"].items())
    print(f"run {args.out}: {len(manifest['cases'])} case(s), kernel collector {manifest['kernel_collector']}, "
          f"placement {manifest['placement']} (CPUs: {cpus}), wait {manifest['wait']}, "
          f"idle {manifest.get('idle', {}).get('policy', 'os')}, "
          f"aslr {manifest.get('aslr', {}).get('setting', 'on')}")
    table(rows_of(manifest), COLUMNS)
    if manifest.get("sweeps"):
        print(f"rounds: {cap.sweeps_summary(manifest['sweeps'])}")
    if manifest.get("phase_seconds"):
        print("time: " + ", ".join(f"{name} {s:.0f} s" for name, s in manifest["phase_seconds"].items()))
    for host, cal in manifest.get("calibration", {}).items():
        k = cal.get("kernel_event_ns", {})
        kk = ", ".join(f"{n.split(':')[-1]} {v}" for n, v in k.items() if v is not None)
        print(f"calibration {host}: user event {cal['ust_event_ns']} ns; kernel events (ns): {kk or '-'}")
    lossy = [c["id"] for c in manifest["cases"] if c.get("lossy")]
    if lossy:
        print(f"WARNING: events were lost in {', '.join(lossy)}: those cases are marked lossy; "
              f"do not use them as complete traces")
    return 0


def _pooled_sd(groups):
    """Pooled sample standard deviation of several groups of values (each about its own mean)."""
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups if len(g) > 1)
    dof = sum(len(g) - 1 for g in groups if len(g) > 1)
    return (ss / dof) ** 0.5 if dof else 0.0


def cmd_bench(args):
    p = params_from(args)
    out = pathlib.Path(args.out) if args.out else ROOT / "runs" / "capture-bench"
    p["replace"] = True
    # Plain rpc-client runs per case (untraced build, same placement and waiting, nothing around
    # them), several rounds once the case's transport has its rounds, so that the host's slow drift
    # (a few % over minutes on this VM) touches both about alike: their spread is the noise the
    # capture's untraced run is judged against.
    plain = {}
    pdir = out / "plain"

    def plain_rounds(c, case):
        pdir.mkdir(exist_ok=True)
        p50s = []
        for r in range(args.plain_rounds):
            c.step(f"{case['id']}: plain run {r + 1}")
            res, _ = c.run_pair(case["transport"], case["size"], p["calls"], p["warmup"], False, pdir,
                                f"{case['id']}-{r}")
            p50s.append(res["rtt_ns"]["p50"])
            c.advance()
        plain[case["id"]] = sorted(p50s)

    try:
        manifest, _ = do_capture(p, out, quiet=args.json, after_case=plain_rounds,
                                 extra_steps=len(p["sizes"]) * len(p["transports"]) * args.plain_rounds)
    finally:
        shutil.rmtree(pdir, ignore_errors=True)
    rows = []
    for case in manifest["cases"]:
        r = rows_of({"cases": [case]})[0]
        p50s = plain[case["id"]]
        med = p50s[len(p50s) // 2]
        u = case["untraced"]["p50"]
        r["plain_p50_us"] = med / 1e3
        r["plain_range_us"] = f"{p50s[0] / 1e3:.1f}-{p50s[-1] / 1e3:.1f}"
        r["untraced/plain"] = u / med
        # Agreement "within noise": the capture's untraced rounds and the plain rounds are two samples
        # of the same run-to-run spread; they agree when their medians differ by at most two standard
        # errors of that difference (pooled sample standard deviation; at least 1 %).
        caps = (case.get("repeats") or {}).get("untraced_p50_ns") or [u]
        sd = _pooled_sd([caps, p50s]) / med
        se = sd * ((1 / len(caps) + 1 / len(p50s)) ** 0.5)
        r["noise_%"] = round(100 * sd, 2)
        r["untraced_agrees"] = "yes" if abs(u / med - 1) <= max(2 * se, 0.01) else "no"
        rows.append(r)
    result = {"run": str(out), "calls": p["calls"], "placement": p["placement"], "wait": p["wait"],
              "kernel_collector": manifest["kernel_collector"], "rows": rows,
              "calibration": manifest.get("calibration", {})}
    if args.json:
        emit_json(result)
        return 0
    print(f"bench capture: {p['calls']} calls per size, placement {p['placement']}, wait {p['wait']}, "
          f"idle {p['idle']}, "
          f"kernel collector {manifest['kernel_collector']} (run in {out})")
    table(rows, COLUMNS[:3] + ["plain_p50_us", "plain_range_us", "noise_%", "untraced/plain",
                                "untraced_agrees"] + COLUMNS[3:])
    print("noise_%: run-to-run standard deviation of p50 (the capture's untraced rounds and the plain rounds, "
          "pooled); untraced_agrees: the two medians differ by at most two standard errors (at least 1 %)")
    return 0


def register(subparsers):
    ap = subparsers.add_parser(
        "capture", help="user and kernel traces of chosen payload sizes on the testbed, plus untraced timings",
        description=cap.__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, 2000, "0,1392,4016,8032")
    ap.add_argument("--holdout", default="", metavar="SIZES",
                    help="sizes the model will predict: captured like the others, but the in-situ probe "
                         "calibration corrects no other case with them (analysis/probe.py); e.g. 1393,6000")
    ap.add_argument("--out", required=True, metavar="runs/NAME", help="the run directory to create")
    ap.add_argument("--inventory", default=None, metavar="PATH",
                    help="real hosts: run ansible/capture.yml per case on this inventory (default: the local testbed)")
    ap.set_defaults(func=cmd_capture)
    return ap


def register_bench(subparsers):
    """`rpcscope bench capture` (subparsers: the bench group's, rpcscope/bench.py)."""
    b = subparsers.add_parser(
        "capture", help="a capture's probe effect, events per call, losses, bytes per call",
        description="Capture, then a plain rpc-client run per size, and the figures side by side.",
        epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(b, 10000, "0,1392,4016,8032")
    b.add_argument("--plain-rounds", type=int, default=5, help="plain rpc-client runs per size (default 5)")
    b.add_argument("--out", default=None, metavar="runs/NAME",
                   help="run directory (default runs/capture-bench, replaced)")
    b.set_defaults(func=cmd_bench)
    return b


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
