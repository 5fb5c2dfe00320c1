"""`rpcscope run`: the main job end to end on the local two-host testbed (what `make run` does).

    testbed up -> deploy -> capture -> analyze -> rtp -> model (per transport) -> report -> testbed down

then it leaves the run directory lean (lean(): the decoded-trace cache removed, the raw traces packed) and
prints its size.

Each stage is the same subcommand a user would type, run in this process with the
arguments printed first, so any stage can be repeated by hand on the run directory.
The testbed is taken down at the end if this command brought it up (also after a
failure or Ctrl-C); one that was already up is left up.
"""
import argparse
import datetime
import io
import json
import pathlib
import shutil
import time
from contextlib import redirect_stdout

from . import ROOT, testbed
from .analysis import tracepack
from .analysis.model import MIN_SIZES, Model
from .analysis.model_cli import rows_table
from .analysis.run import load_run, path_shape, traced_noise_pct
from .analysis.unitcosts import params_table
from .cli import main
from .collectors.capture import (
    DEFAULT_REPEATS,
    EXTRA_SWEEP_SECONDS,
    MIN_TURNS_ROUNDS,
    TURNS_REPEATS,
    check_extra_sweep_seconds,
)
from .collectors.perf import KERNEL_EVENT_SETS
from .interrupts import interruptible, uninterrupted
from .output import UserError, emit_json, table
from .rundir import RunDir
from .target_run import TARGETS, cmd_run_target
from .units import fmt_rate

DCE_SIZES = (0, 1392, 4016, 8032, 16064, 24096)    # the DCE study's Table 2 and Figure 6 sizes
# Predicted, not fitted: past the IP-packet boundary (maxarg's 4-byte length puts it at 1388/1389),
# between fitted sizes with other fragment counts, and beyond the fitted range (more windows).
HOLDOUT_SIZES = (1389, 5000, 10000, 30000, 50000)
RUN_CALLS = 5000                                   # measured calls per size and run (below, --calls)
# `make run` must finish in 10 minutes from a bootstrapped clone; make's own part (a venv and three
# builds in a fresh clone) takes about 1 minute, so this command keeps to 8 minutes: the capture's
# extra sweeps stop where another would not leave AFTER_CAPTURE_SECONDS for the stages after it.
RUN_MAX_SECONDS = 480
# The stages after the capture (analyze, rtp, model, report, testbed down) take about 80-95 s on a
# slow host (analyze 12-15 s, the round-trip path 67-80 s).
AFTER_CAPTURE_SECONDS = 120

EPILOG = """examples:
  rpcscope run                                   DCE sizes fitted, 1389,5000,10000,30000,50000 predicted, UDP and TCP
  rpcscope run --link-rate 10mbit --sizes 0,1392,4016,8032 --holdout ''    on a shaped link
  rpcscope run --transport udp --calls 2000 --out runs/dce-udp    a quicker, noisier run
  rpcscope run --sizes 0,4016,8032 --holdout 6000 --keep-testbed
  rpcscope run --json                            the % error tables and paths as JSON
  rpcscope run --max-seconds 0                   no time limit: extra sweeps end only at --extra-sweep-seconds
  rpcscope run --target libtirpc --transport udp,tcp --proc echo --sizes 0,1392,4016 --uprobe peer_call:call
                                                 an unmodified ONC RPC from kernel events, its call function probed

Stages (each printed with its command line, so it can be re-run by hand):
  rpcscope testbed up; rpcscope deploy; rpcscope capture ...; rpcscope analyze RUN;
  rpcscope rtp RUN; rpcscope model RUN --transport T --holdout ...; rpcscope report RUN;
  rpcscope testbed down (when this command brought the testbed up)
Then the run directory is made lean and its size printed: the analysis's decoded-trace cache is
removed and each case's raw traces packed (cases/ID/ust.tar.zst, kernel.tar.zst, about an eighth of
the raw CTF); `rpcscope analyze|rtp|export` unpack a case's traces where they read them.
"""


def _sizes(text, what):
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--{what} {text!r}: give byte counts separated by commas, e.g. 0,4016") from None
    if any(s < 0 for s in out):
        raise UserError(f"--{what} {text!r}: sizes are byte counts, 0 or more")
    return out


class Stages:
    def __init__(self, total, quiet):
        self.k = 0
        self.total = total
        self.quiet = quiet
        self.timings = []

    def run(self, name, argv, capture_output=False):
        """Run `rpcscope ARGV` in this process; a non-zero exit stops the pipeline with the stage named."""
        self.k += 1
        if not self.quiet:
            print(f"\n[{self.k}/{self.total}] {name}: rpcscope {' '.join(argv)}", flush=True)
        t0 = time.monotonic()
        buf = io.StringIO()
        if capture_output or self.quiet:
            with redirect_stdout(buf):
                rc = main(argv)
        else:
            rc = main(argv)
        self.timings.append({"stage": name, "seconds": round(time.monotonic() - t0, 1)})
        if rc == 130:             # the stage's own main() took the interrupt: it stops the run too
            raise KeyboardInterrupt
        if rc != 0:
            tail = buf.getvalue().strip().splitlines()[-5:]
            raise UserError(f"stage '{name}' failed (exit {rc}); the message above says why"
                            + (": " + " | ".join(tail) if tail else "")
                            + f". Re-run it alone with: rpcscope {' '.join(argv)}")
        return buf.getvalue()


def cmd_run(args):

    sizes = _sizes(args.sizes, "sizes")
    holdout = _sizes(args.holdout, "holdout") if args.holdout else []
    transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    if not transports or any(t not in ("udp", "tcp") for t in transports):
        raise UserError(f"--transport {args.transport!r}: use udp, tcp or udp,tcp")
    if args.target:
        return cmd_run_target(args, sizes, transports, testbed, main)
    if args.uprobe:
        raise UserError("--uprobe goes with --target (the reference RPC's own steps come from its tracepoints)")
    all_sizes = sorted(set(sizes) | set(holdout))
    if len(set(sizes) - set(holdout)) < 2:
        raise UserError("the model needs at least two fitted sizes besides the held-out ones")
    check_extra_sweep_seconds(args.extra_sweep_seconds)      # before the testbed comes up, not at the capture
    if args.max_seconds and not AFTER_CAPTURE_SECONDS < args.max_seconds <= 86400:
        raise UserError(f"--max-seconds {args.max_seconds:g}: give more than {AFTER_CAPTURE_SECONDS} (the stages "
                        "after the capture need about that) and at most 86400, or 0 for no limit")
    state = testbed.load_state()
    link = link_options(args, state)
    vm = [r for r in ("client", "server") if getattr(args, r, "netns") == "vm"]
    if vm:
        _check_vm_run(args, state, vm)
    if vm:      # a guest under TCG runs many times slower: no time limit, one case after another
        args.turns, args.max_seconds = args.turns or "off", 0
    if args.turns is None:
        # Runs taking turns share one link: on a shaped one, each run's turns would refill the token bucket
        # for the others, and the bucket's pace (what the model predicts for back-to-back calls) is lost.
        args.turns = "off" if "--link-rate" in link else "on"
    if args.turns == "on" and args.kernel in ("perf", "lttng"):
        raise UserError(f"--kernel {args.kernel}: its recorder cannot be switched off for the untraced runs' turns; "
                        "use --kernel ftrace (or auto), or --turns off")
    out = pathlib.Path(args.out or f"runs/run-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    if out.exists() and not args.replace:
        raise UserError(f"{out} already exists; choose another --out or pass --replace")
    for d, hint in ((ROOT / "build" / "trace" / "bin", "make"), (ROOT / "build" / "notrace" / "bin", "make TRACE=0")):
        if not (d / "rpc-client").exists():
            raise UserError(f"{d}/rpc-client is missing; build it with `{hint}` (make run does)")

    # The model fits a unit cost where MIN_SIZES fitted sizes count it: with fewer, its stage is left out.
    fit_model = len(set(sizes) - set(holdout)) >= MIN_SIZES
    st = Stages(5 + (len(transports) if fit_model else 0) + 2, args.json)
    started_testbed = testbed.load_state() is None
    t0 = time.monotonic()
    result = {"run": str(out), "sizes": sizes, "holdout": holdout, "transports": transports, "models": {}}
    # SIGTERM too (a kill, CI cancelling the job, make passing on the signal it got) stops the run
    # through `finally`, so that the testbed it started goes down (rpcscope/interrupts.py).
    with interruptible():
        try:
            st.run("testbed up", ["testbed", "up"] + link + [a for r in vm for a in (f"--{r}", "vm")])
            st.run("deploy", ["deploy"])
            cap = vm_capture_args(args, all_sizes, transports, out) if vm else \
                ["capture", "--sizes", ",".join(map(str, all_sizes)), "--proc", args.proc,
                   "--transport", ",".join(transports), "--calls", str(args.calls), "--warmup", str(args.warmup),
                   "--kernel", args.kernel, "--placement", args.placement, "--idle", args.idle,
                   "--aslr", args.aslr, "--kernel-events", args.kernel_events,
                   "--calibration", "quick", "--repeats", str(run_repeats(args)),
                   "--extra-sweep-seconds", f"{args.extra_sweep_seconds:g}", "--out", str(out)] + \
                capture_deadline(args.max_seconds, time.monotonic() - t0) + \
                ([] if args.no_clock_reads else ["--clock-reads"]) + (["--turns"] if args.turns == "on" else []) + \
                (["--holdout", ",".join(map(str, holdout))] if holdout else []) + \
                (["--replace"] if args.replace else [])
            st.run("capture", cap)
            st.run("analyze", ["analyze", str(out)])
            st.run("round-trip path", ["rtp", str(out), "--quiet"])
            result["corrected_vs_untraced"] = corrected_vs_untraced(out)
            if not fit_model:
                result["model_skipped"] = (f"the model needs {MIN_SIZES} fitted sizes or more, this run has "
                                           f"{len(set(sizes) - set(holdout))}: no model stage (give more --sizes)")
                if not args.json:
                    print(f"\n[model] skipped: {result['model_skipped']}", flush=True)
            for t in transports if fit_model else []:
                mfile = RunDir(out).model_json(t)
                argv = ["model", str(out), "--transport", t, "--holdout", ",".join(map(str, holdout)),
                        "--out", str(mfile)]
                st.run(f"model ({t})", argv + ["--json"], capture_output=True)
                result["models"][t] = json.loads(mfile.read_text())
            st.run("report", ["report", str(out)])
        finally:
            if started_testbed and not args.keep_testbed:
                if not args.json:
                    print("\n[end] testbed down: rpcscope testbed down", flush=True)
                with uninterrupted(), redirect_stdout(io.StringIO()):
                    main(["testbed", "down"])
    if not args.json:
        print("\n[end] a lean run directory: the decoded-trace cache goes, the raw traces are packed", flush=True)
    t1 = time.monotonic()
    result["lean"] = lean(out)
    st.timings.append({"stage": "pack", "seconds": round(time.monotonic() - t1, 1)})
    result["run_dir_bytes"] = tracepack.disk_bytes(out)
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["max_seconds"] = args.max_seconds or None
    result["stages"] = st.timings
    result["report"] = str(RunDir(out).report_html)
    if args.json:
        emit_json(result)
        return 0
    print(f"\nrpcscope run: {out} in {result['seconds']:.0f} s "
          f"({', '.join('%s %.0fs' % (x['stage'], x['seconds']) for x in st.timings)})")
    if args.max_seconds and result["seconds"] > args.max_seconds:
        print(f"WARNING: over its --max-seconds {args.max_seconds:g} by {result['seconds'] - args.max_seconds:.0f} s: "
              "the capture's extra sweeps, and rounds taking turns beyond the first "
              f"{MIN_TURNS_ROUNDS}, give way to the limit, and the rest took longer on this host (see the "
              "capture's time: line); give fewer --repeats or --calls, or a larger limit")
    if result.get("corrected_vs_untraced"):
        print("\nProbe effect removed (goal: corrected traced p50 within 5 % of the untraced p50). noise: half the "
              "spread of the case's traced rounds' p50s in the kept round's speed level, as % of the untraced p50 "
              "(how far one traced run moves)")
        print("sleeps, ipis: how often the client/server blocked per call in the kept round's runs, and the "
              "interrupts per call their CPUs got; same_path NO: the untraced run blocked in other waits than the "
              "traced one or was woken otherwise, a path no step cost of the traced run follows (the model's fit "
              "describes the traced path)")
        table(result["corrected_vs_untraced"], ["case", "traced_p50_us", "corrected_p50_us", "untraced_p50_us",
                                                "corrected_%", "noise_%", "within_5%", "sleeps_untraced",
                                                "sleeps_traced", "ipis_untraced", "ipis_traced", "same_path"])
    for t, m in result["models"].items():
        print(f"\nRTT model, {t.upper()} ({args.proc}; {m['link_described']}; {m['source']}/analysis/model-{t}.json)")
        mod = Model.from_json(m)
        params_table(m["params"])
        rows = mod.rows()
        rows_table(rows)
        s = mod.summary(rows)["mean_abs_error_pct"]
        if s["model"] is not None:
            print(f"mean |% error| over the predicted sizes: model {s['model']:.2f}, interpolation "
                  f"{s['interpolation']:.2f}, line {s['line']:.2f}")
    print("\n% error = (measured - calculated) x 100 / measured; measured: the untraced p50 of the round whose "
          "traces the fit used; cv: the fitted size left out of its own fit; interp, line: the baselines")
    print(f"\nreport: {result['report']}")
    print(f"        {out / 'report' / 'report.md'}")
    if started_testbed and not args.keep_testbed:
        print("testbed: down again (it was down when this run started)")
    print_lean(out, result["lean"], result["run_dir_bytes"])
    return 0


def lean(out):
    """Leave the run directory lean: remove the analysis's decoded-trace cache (every reader rebuilds it from
    the traces) and pack each raw trace directory into its archive (analysis/tracepack.py; a reader unpacks a
    case's traces when it first needs them). {what was done, in bytes on disk}."""
    cache = load_run(out).cache_dir
    cache_bytes = tracepack.disk_bytes(cache)
    shutil.rmtree(cache, ignore_errors=True)
    packed = tracepack.pack(out)
    return {"cache_removed_bytes": cache_bytes, "traces_packed": packed.traces,
            "traces_raw_bytes": packed.raw_bytes, "traces_packed_bytes": packed.packed_bytes}


def print_lean(out, done, size):
    mb = 1e6
    print(f"run directory: {out}, {size / mb:.0f} MB on disk: {done['traces_packed']} traces packed "
          f"({done['traces_raw_bytes'] / mb:.0f} MB -> {done['traces_packed_bytes'] / mb:.0f} MB, "
          f"cases/*/{{ust,kernel}}{tracepack.SUFFIX}), "
          f"the decoded-trace cache ({done['cache_removed_bytes'] / mb:.0f} MB) "
          "removed")
    print("        `rpcscope analyze|rtp|export RUN` unpack a case's traces where they read them and decode them "
          "into analysis/cache again (the directory grows back towards its size before packing); "
          "the report, steps, path and models need neither")


def link_options(args, state):
    """`testbed up`'s link options: where the run names any of --link-rate, --mtu, --loss, those it names
    and the defaults for the others; where it names none, those of a testbed that is up already (so that
    a link the user shaped stays shaped), else none (an unshaped link of the default MTU)."""
    named = any(v is not None for v in (args.link_rate, args.mtu, args.loss))
    link = {} if named else (state or {}).get("link") or {}
    rate = args.link_rate if args.link_rate is not None else \
        (fmt_rate(link["rate_bit"]) if link.get("rate_bit") else None)
    mtu = args.mtu if args.mtu is not None else link.get("mtu")
    loss = args.loss if args.loss is not None else link.get("loss_percent")
    out = []
    if rate and rate not in ("none", "unshaped"):
        out += ["--link-rate", str(rate)]
    if mtu:
        out += ["--mtu", str(mtu)]
    if loss:
        out += ["--loss", f"{float(loss):g}"]
    return out


def _check_vm_run(args, state, vm):
    """A run with a QEMU guest as a host (--server vm, --client vm): the testbed this command brings up, or
    one already up with those guests; the real-host capture path (collectors/remote.py) takes the
    options that apply to it."""
    if state is not None:
        kinds = {h.get("role"): h.get("kind") for h in state.get("hosts", [])}
        if any(kinds.get(r) != "vm" for r in vm):
            up = ", ".join(f"{r} {k}" for r, k in kinds.items())
            raise UserError(f"--{vm[0]} vm: a testbed is up without that guest ({up}); "
                            "take it down first (`rpcscope testbed down`) or drop --server/--client vm")
    if args.kernel == "ftrace":
        raise UserError("--kernel ftrace: a guest records with LTTng or perf (the real-host capture path); use "
                        "--kernel auto (LTTng in the guest, perf on this machine's namespace)")
    if args.turns == "on":
        raise UserError("--turns on: the local testbed's one kernel only; a guest is captured one case after "
                        "another (drop --turns or use --turns off)")


def vm_capture_args(args, sizes, transports, out):
    """`rpcscope capture` through the testbed's inventory (ansible/capture.yml, as on real hosts): no
    calibration, clock reads or turns there (collectors/remote.py)."""
    return ["capture", "--inventory", str(testbed.INVENTORY), "--sizes", ",".join(map(str, sizes)),
            "--proc", args.proc, "--transport", ",".join(transports), "--calls", str(args.calls),
            "--warmup", str(args.warmup), "--kernel", args.kernel, "--placement", args.placement,
            "--idle", args.idle, "--aslr", args.aslr, "--kernel-events", args.kernel_events,
            "--calibration", "none", "--out", str(out)] + (["--replace"] if args.replace else [])


def run_repeats(args):
    """The capture's --repeats: the run's own, else TURNS_REPEATS taking turns and DEFAULT_REPEATS not."""
    if args.repeats is not None:
        return args.repeats
    return TURNS_REPEATS if args.turns == "on" else DEFAULT_REPEATS


def capture_deadline(max_seconds, elapsed):
    """The capture's --deadline-seconds from the run's --max-seconds (0: none) and the seconds the run
    has taken so far: what is left once the stages after the capture have theirs."""
    if not max_seconds:
        return []
    return ["--deadline-seconds", f"{max(1.0, max_seconds - elapsed - AFTER_CAPTURE_SECONDS):.0f}"]


def corrected_vs_untraced(out):
    """Per case: traced, probe-corrected and untraced p50 RTT (analysis/rtp.json), and the noise of one
    traced run (half the spread of the traced rounds that agree with the kept one, manifest.json cases[].repeats)."""
    try:
        rtp = json.loads(RunDir(out).rtp_json.read_text())
        cases = {c["id"]: c for c in json.loads(RunDir(out).manifest_path.read_text())["cases"]}
    except (OSError, ValueError, KeyError):
        return []
    rows = []
    for c in rtp.get("cases", []):
        u, corr = c.get("untraced_p50_ns"), c.get("rtt_corrected_median_ns")
        if not u or corr is None:
            continue
        noise = traced_noise_pct(cases.get(c["case"]) or {})
        shape = path_shape(cases.get(c["case"]) or {}) or {}
        pct = 100 * (corr - u) / u
        traced = c["rtt_median_ns"] + (c.get("call_edges_ns") or 0.0)     # as the client's clock measures it
        rows.append({"case": c["case"], "traced_p50_us": round(traced / 1e3, 2),
                     "corrected_p50_us": round(corr / 1e3, 2), "untraced_p50_us": round(u / 1e3, 2),
                     "corrected_%": round(pct, 1), "noise_%": None if noise is None else round(noise, 1),
                     "within_5%": "yes" if abs(pct) <= 5 else "NO",
                     "sleeps_untraced": shape.get("untraced", ""), "sleeps_traced": shape.get("traced", ""),
                     "ipis_untraced": shape.get("untraced_ipi", ""), "ipis_traced": shape.get("traced_ipi", ""),
                     "same_path": {True: "yes", False: "NO"}.get(shape.get("same"), "")})
    return rows


def register(subparsers):
    ap = subparsers.add_parser(
        "run", help="the main job on the local testbed: up, deploy, capture, analyze, rtp, model, report, down",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(map(str, DCE_SIZES)),
                    help=f"fitted payload sizes (default the DCE study's: {','.join(map(str, DCE_SIZES))})")
    ap.add_argument("--holdout", default=",".join(map(str, HOLDOUT_SIZES)),
                    help=f"sizes captured but predicted without fitting (default {','.join(map(str, HOLDOUT_SIZES))}; "
                         "'' for none)")
    ap.add_argument("--transport", default="udp,tcp", help="udp, tcp or udp,tcp (default udp,tcp)")
    ap.add_argument("--proc", default="maxarg", help="procedure (default maxarg: the DCE study's MAXARG)")
    # 5000, not the capture's 2000: one run's p50 moves less from the next identical run's the longer it
    # lasts (untraced, fresh processes, alternating, 12 runs each: the spread of p50s falls from about
    # 1 % to 0.8 % at 0 bytes, 1.2 % to 0.5 % at 8032 and 0.8 % to 0.2 % at 24096 from 2000 to 8000
    # calls), and the model's goals are that tight. It costs the capture 2-3 s a sweep of the sizes per 1000 calls.
    ap.add_argument("--calls", type=int, default=RUN_CALLS, help=f"measured calls per size (default {RUN_CALLS})")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up calls per size (default 200)")
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"rounds of untraced and traced runs per size (default {TURNS_REPEATS} taking turns, "
                         f"{DEFAULT_REPEATS} with --turns off); with --target, rounds of every case, each case once "
                         "a round (default 1)")
    ap.add_argument("--extra-sweep-seconds", type=float, default=EXTRA_SWEEP_SECONDS,
                    help="while the rounds do not agree, extra sweeps of a transport's sizes for at most this "
                         f"many seconds (default {EXTRA_SWEEP_SECONDS:g}; 0: none; capture --help)")
    ap.add_argument("--max-seconds", type=float, default=RUN_MAX_SECONDS,
                    help=f"finish in about this many seconds (default {RUN_MAX_SECONDS}; 0: no limit): the "
                         f"capture makes no extra sweep that would leave less than {AFTER_CAPTURE_SECONDS} s for "
                         "the stages after it (capture --deadline-seconds); the planned --repeats always run")
    ap.add_argument("--kernel", choices=("auto", "perf", "ftrace", "lttng"), default="auto",
                    help="kernel collector (default auto: LTTng's kernel tracer where it loads, else ftrace, "
                         "else perf; collectors/README.md)")
    ap.add_argument("--placement", choices=("split", "same"), default="split", help="CPU placement (default split)")
    ap.add_argument("--idle", choices=("poll", "os"), default="poll", help="idle CPUs poll or halt (default poll)")
    ap.add_argument("--aslr", choices=("off", "on"), default="off",
                    help="address-space layout randomization of the RPC processes (default off: one layout for "
                         "every run; collectors/README.md)")
    ap.add_argument("--kernel-events", choices=KERNEL_EVENT_SETS, default="lean",
                    help="lean: the kernel events the analysis needs (default); full: also each device's start of "
                         "transmit, sched_wakeup and the bridge's side of each veth pair (collectors/README.md)")
    ap.add_argument("--no-clock-reads", action="store_true",
                    help="skip the clock build's run in each round of each size (capture --clock-reads, ~50 s "
                         "a capture): the step tables then have no clock-read column")
    ap.add_argument("--turns", choices=("on", "off"), default=None,
                    help="on (the default on an unshaped link): every size and kind of a round runs at once, taking "
                         "turns of 20 calls (capture --turns), so that Measured, the traced runs and every size share "
                         "the host's moments; off (the default on a shaped link, whose token bucket the runs would "
                         "share): one after the other, in sweeps")
    ap.add_argument("--link-rate", metavar="RATE", help="shape the testbed's link (testbed up --link-rate), e.g. "
                    "10mbit; default: where none of --link-rate, --mtu, --loss is given, the link of a testbed "
                    "that is up, else none; where one is, the others take their defaults")
    ap.add_argument("--mtu", type=int, metavar="BYTES",
                    help="the link's MTU (testbed up --mtu; default as --link-rate)")
    ap.add_argument("--loss", type=float, metavar="PERCENT", help="packet loss on the link (testbed up --loss)")
    ap.add_argument("--target", choices=sorted(TARGETS),
                    help="an RPC rpcscope did not write, unmodified, from kernel events alone (rpcscope/target_run.py):"
                         " "
                         "capture its calls at --sizes over --transport, match each request with its reply, "
                         "its round-trip path and step costs (--holdout, the model's stages and --kernel do not apply)")
    for role in ("client", "server"):
        ap.add_argument(f"--{role}", choices=("netns", "vm"), default="netns",
                        help=f"the {role} host: a namespace on this machine's kernel (default) or vm, a QEMU guest "
                             "with its own kernel (testbed up --" + role + " vm; make vm builds it); the capture then "
                             "goes through the inventory as on real hosts (no calibration, clock reads or turns)")
    ap.add_argument("--uprobe", action="append", default=[], metavar="SYMBOL[:STEP]",
                    help="with --target: probe a function of the target's client, server or their libraries at its "
                         "entry and return (perf probe -x), e.g. peer_echo_1:call, rpcspeer_prog_1:dispatch, "
                         "rpcspeer::Peer::Stub::Echo:call; repeatable. A function that encloses each call (the "
                         "client's call function: peer_call for libtirpc, '(anonymous namespace)::peer_call' for "
                         "gRPC) adds the call's edges KC1, KC2, which the kernel cannot see, to its path and RTT")
    ap.add_argument("--out", metavar="runs/NAME", help="run directory (default runs/run-DATE-TIME)")
    ap.add_argument("--replace", action="store_true", help="replace an existing run directory of that name")
    ap.add_argument("--keep-testbed", action="store_true", help="leave the testbed up at the end")
    ap.add_argument("--json", action="store_true", help="print the %% error tables, timings and paths as JSON")
    ap.set_defaults(func=cmd_run)
    return ap

