"""`rpcscope experiment courier`: Courier against PCourier (seed 000, Tables 1-8) with the reference RPC.

TCP (Courier) against UDP (PCourier); arguments of 0, 4, 400 and 4000 bytes, with a result (the
`courier` procedure returns an integer) and without (`courier_oneway`: the client does not wait for
anything); 2000 calls a run, repeated, as the paper's runs were. Per cell: min / max / avg ± sd of
the per-call time (avg: the median of the rounds' means, sd: the standard deviation of the rounds'
means) and calls per second; TCP over UDP in the same rounds. Then the client's CPU, from a perf
profile (cpu-clock samples with call graphs) of one longer run per transport and result: the share
of its CPU time in sending (the send system calls and everything under them), in receiving (the
receive and wait system calls) and in marshalling with its byte swapping (rpc/marshal.c), as the
paper split its profile into write, read and byte swapping. The peers take no part: the Courier
workload is the reference RPC's own (one-way calls, a result of an integer).
"""
import dataclasses
import re
import shutil
import statistics
import subprocess

from ..output import UserError
from .systems import NOTRACE_BIN, PORTS, Servers
from .tables import Spec, count_runs, fmt, paper, progress_bar, ratio, sweep, text_table

SIZES = (0, 4, 400, 4000)
PROFILE_SIZE = 400
PROFILE_CALLS = 20000
PROFILE_SECONDS = 10
SEND = ("__x64_sys_sendto", "__x64_sys_sendmsg", "__x64_sys_write", "__x64_sys_writev", "__x64_sys_sendmmsg")
RECEIVE = ("__x64_sys_recvfrom", "__x64_sys_recvmsg", "__x64_sys_read", "__x64_sys_readv", "__x64_sys_epoll_wait",
           "__x64_sys_epoll_pwait", "__x64_sys_select", "__x64_sys_pselect6", "__x64_sys_poll", "__x64_sys_ppoll",
           "__x64_sys_recvmmsg")
REPORT_LINE = re.compile(r"^\s*([0-9.]+)%\s+([0-9.]+)%\s+\S*\s*\[(.)\]\s+(\S+)")


@dataclasses.dataclass
class CourierRun:
    meta: dict
    table: dict
    cells: dict
    failures: list


def specs(transports):
    return [Spec("rpcscope", t, proc, size) for size in SIZES for proc in ("courier", "courier_oneway")
            for t in transports]


def run(args, placement, calls, transports, budget, tmp):
    for t in transports:
        if t not in ("udp", "tcp"):
            raise UserError(f"--transports {args.transports!r}: use udp, tcp or udp,tcp")
    sp = specs(transports)
    profile = not args.no_profile
    if profile and not shutil.which("perf"):
        raise UserError("perf is not installed (make bootstrap installs linux-perf); or pass --no-profile")
    total = count_runs(sp, args.repeats) + (2 * len(transports) if profile else 0)
    profiles = {}
    with progress_bar(total, "courier", args.json) as bar, \
            Servers(placement, ("rpcscope",), tmp, args.max_minutes * 60 + 60, args.executors) as srv:
        cells = sweep(srv, sp, args.repeats, calls, args.warmup, budget, bar, wait=args.wait)
        if profile:
            for t in transports:
                for proc in ("courier", "courier_oneway"):
                    budget.check()
                    bar.set_postfix_str(f"perf profile {t} {proc}", refresh=False)
                    profiles[f"{t} {proc}"] = profile_client(srv, t, proc, PROFILE_SIZE, args.wait, tmp)
                    bar.update(1)
    table = build(cells, transports, profiles)
    bad = [(f"{c.spec.transport} {c.spec.proc} {c.spec.size}", c.error) for c in cells.values() if not c.ok]
    bad += [(f"perf profile {k}", v["error"]) for k, v in profiles.items() if v.get("error")]
    meta = {"transports": transports, "profile": {"size": PROFILE_SIZE, "calls": PROFILE_CALLS,
                                                  "event": "cpu-clock", "call_graph": "fp"} if profile else None}
    return CourierRun(meta=meta, table=table, cells=cells, failures=bad)


def profile_client(servers, transport, proc, size, wait, tmp):
    """The client's CPU split from `perf record -g` of one run: {send, receive, marshal, other}: % of
    its samples, and the run's own check."""
    p = servers.p
    data = f"{tmp}/perf-{transport}-{proc}.data"
    argv = ["ip", "netns", "exec", p.client_ns, "taskset", "-c", str(p.client_cpu), "perf", "record", "-q",
            "-e", "cpu-clock", "-F", "4999", "-g", "-o", data, "--", "setarch", "-R", str(NOTRACE_BIN / "rpc-client"),
            "--server", p.server_addr, "--port", str(PORTS["rpcscope"]), "--transport", transport, "--proc", proc,
            "--size", str(size), "--calls", str(PROFILE_CALLS), "--warmup", "100", "--cpu", str(p.client_cpu),
            "--wait", wait, "--max-seconds", str(PROFILE_SECONDS), "--hist-bin-ns", "0", "--json"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=PROFILE_SECONDS + 60)
    except subprocess.TimeoutExpired:
        return {"error": "perf record of the client did not finish in time"}
    if r.returncode:
        return {"error": f"perf record of the client failed (exit {r.returncode}): {r.stderr.strip()[-300:]}"}
    try:
        rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--children", "--sort", "sym", "-g", "none",
                              "--percent-limit", "0"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "perf report did not finish in time"}
    if rep.returncode:
        return {"error": f"perf report failed (exit {rep.returncode}): {rep.stderr.strip()[-300:]}"}
    split = classify(rep.stdout)
    samples = re.search(r"# Samples: (\S+)", rep.stdout)
    split["samples"] = samples.group(1) if samples else None
    return split


def classify(report):
    """{send, receive, marshal, other}: % of the samples, from `perf report --children --sort sym`."""
    children, self_pct = {}, {}
    for line in report.splitlines():
        m = REPORT_LINE.match(line)
        if m:
            children[m.group(4)] = max(children.get(m.group(4), 0.0), float(m.group(1)))
            self_pct[m.group(4)] = self_pct.get(m.group(4), 0.0) + float(m.group(2))
    send = sum(children.get(s, 0.0) for s in SEND)
    receive = sum(children.get(s, 0.0) for s in RECEIVE)
    marshal = sum(v for k, v in self_pct.items() if k.startswith("marshal_") or "bswap" in k)
    return {"send_pct": send, "receive_pct": receive, "marshal_pct": marshal,
            "other_pct": max(0.0, 100.0 - send - receive - marshal)}


def build(cells, transports, profiles):
    rows_paper, note = paper("courier_ms_per_call.csv")
    paper_by = {(int(r["arg_bytes"]), r["result"]): r for r in rows_paper if r["link"] == "vax-vax"}
    rows = []
    for size in SIZES:
        for proc, res in (("courier", "yes"), ("courier_oneway", "no")):
            row = {"arg_bytes": size, "result": res, "today": {}, "paper_ms": {}}
            for t in transports:
                c = cells[Spec("rpcscope", t, proc, size)]
                means = c.values("mean_us")
                row["today"][t] = {"min_us": min(c.values("min_us"), default=None),
                                   "max_us": max(c.values("max_us"), default=None),
                                   "avg_us": statistics.median(means) if means else None,
                                   "sd_us": statistics.stdev(means) if len(means) > 1 else None,
                                   "calls_per_s": c.median("calls_per_s"), "cell": c.as_json()}
            if len(transports) == 2:
                med, sp = ratio(cells[Spec("rpcscope", "tcp", proc, size)], cells[Spec("rpcscope", "udp", proc, size)],
                                "mean_us")
                row["tcp_over_udp"] = {"median": med, "spread_pct": sp}
            p = paper_by.get((size, res), {})
            row["paper_ms"] = {k: float(p[k]) if p.get(k) else None
                               for k in ("courier_ms", "pcourier_ms", "pcourier_corrected_ms")}
            c_ms, pc_ms = row["paper_ms"]["courier_ms"], row["paper_ms"]["pcourier_corrected_ms"]
            row["paper_courier_over_pcourier"] = c_ms / pc_ms if c_ms and pc_ms else None
            rows.append(row)
    return {"rows": rows, "profile": profiles, "paper_source": note}


def render(result, res, say=print):
    tab = result["table"]
    ts = result["transports"]
    say(f"Courier (seed 000): reference RPC, {result['calls']} calls a run, {result['repeats']} rounds; per-call "
        f"time in us: min / max over the rounds, avg ± sd of the rounds' means; {result['placement']}; "
        f"--wait {result['wait']}")
    lines = []
    for row in tab["rows"]:
        d = {"arg bytes": str(row["arg_bytes"]), "result": row["result"]}
        for t in ts:
            v = row["today"][t]
            name = "TCP" if t == "tcp" else "UDP"
            d[f"{name} min"] = fmt(v["min_us"])
            d[f"{name} max"] = fmt(v["max_us"])
            d[f"{name} avg±sd"] = (f"{v['avg_us']:.1f}±{v['sd_us']:.1f}" if v["avg_us"] is not None and
                                   v["sd_us"] is not None else fmt(v["avg_us"]))
            d[f"{name} calls/s"] = fmt(v["calls_per_s"], 0)
        if "tcp_over_udp" in row:
            d["TCP/UDP"] = fmt(row["tcp_over_udp"]["median"], 2)
        d["paper Courier ms"] = fmt(row["paper_ms"]["courier_ms"], 1)
        d["paper PCourier ms"] = fmt(row["paper_ms"]["pcourier_corrected_ms"], 1)
        d["paper C/PC"] = fmt(row["paper_courier_over_pcourier"], 2)
        lines.append(d)
    text_table(lines, list(lines[0].keys()), say=say)
    say("paper: VAX-to-VAX, 4.1c BSD; Courier = TCP, PCourier = UDP (lost-packet timeouts removed); "
        "4000-byte PCourier calls did not fit one packet")
    if tab["profile"]:
        say("")
        say(f"The client's CPU time (perf cpu-clock samples, call graphs; {PROFILE_SIZE}-byte argument, "
            f"{PROFILE_CALLS} calls), % of its samples:")
        text_table([{"run": k, "send": fmt(v.get("send_pct")), "receive": fmt(v.get("receive_pct")),
                     "marshal / byte swap": fmt(v.get("marshal_pct")), "other": fmt(v.get("other_pct")),
                     "samples": str(v.get("samples") or v.get("error", ""))} for k, v in tab["profile"].items()],
                   ["run", "send", "receive", "marshal / byte swap", "other", "samples"], say=say)
