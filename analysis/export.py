"""`rpcscope export runs/NAME --case ID --call N`: calls of a case as a Perfetto trace, to open in
ui.perfetto.dev (Open trace file) or any viewer that reads Perfetto's TrackEvent protos.

    from rpcscope.analysis.export import export_calls
    ex = export_calls("runs/NAME", "udp-maxarg-4016", calls=range(3, 4), out="call-3.perfetto-trace")
    ex.call_ids, ex.slices, ex.instants, ex.flows

What the trace holds, per exported call (its calls are rebuilt from the traces as `rpcscope analyze`
rebuilds them, analysis/rpcs.py):
  tracks     the client and the server process, one track per thread of the case under it; a step
             that overlaps another one on its thread without nesting in it goes on a child track
             ("... overlapping steps") so that every track's slices nest
  slices     each occurrence of each step measured in the call (the catalog's C1..C22, S1..S16 and
             the rows sendmsg' / sendmsg'', C7-C9, C14-C17, S8-S10, RTT), named "ID name", with the
             step id, call number, call id and occurrence as arguments
  instants   the kernel events in the call's time on the CPUs its threads ran on: on the track of
             the case's thread that ran them (a switch: the thread switched in), else on a track of
             that CPU (softirqs in another thread, the idle task)
  flows      packet: a device's hand-off (net_dev_xmit) to the receive of the same buffer
             (netif_receive_skb); wake-up: sched_waking of a thread of the case to its switch in

Calls are numbered as the analysis counts them: 0 is the first measured call after the warm-up,
in call-id order (the order the client made them).
"""
from __future__ import annotations

import argparse
import collections
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
    ProcessDescriptor,
    ThreadDescriptor,
    Trace,
    TracePacket,
    TrackDescriptor,
    TrackEvent,
)

from rpcscope.output import UserError, emit_json
from rpcscope.tracepoints import STEPS

from . import rpcs as R
from .graph import PACKET_GAP_NS, SOFTIRQ_NAMES
from .run import RunError, load_run
from .traceread import KIND, KIND_NAME, TraceError

SEQUENCE = 1                    # one trusted packet sequence for the whole trace
SUFFIX = ".perfetto-trace"
_NAMES = {s["id"]: s["name"] for s in STEPS} | {k: v[2] for k, v in R.EXTRA_ROWS.items()}
_SIDE = {s["id"]: s["side"] for s in STEPS} | {k: v[0] for k, v in R.EXTRA_ROWS.items()}


class ExportError(Exception):
    pass


@dataclass
class Exported:
    """One written trace: the case, the calls in it (numbers and call ids), what it holds."""
    case: str
    path: Path
    calls: list = field(default_factory=list)        # call numbers (0 = first measured call)
    call_ids: list = field(default_factory=list)
    slices: int = 0
    instants: int = 0
    flows: int = 0
    missing: dict = field(default_factory=dict)      # call number -> [steps that apply but were not found]


@dataclass
class _Slice:
    track: int                  # thread id
    begin: int
    end: int
    name: str
    args: dict
    lane: int = 0


@dataclass
class _Instant:
    track: tuple                # ("thread", tid) or ("cpu", cpu)
    ts: int
    name: str
    args: dict
    flow_out: list = field(default_factory=list)
    flow_in: list = field(default_factory=list)


# ------------------------------------------------------------------ the calls, rebuilt


def _case(run, case_id):
    for c in run.cases:
        if c.id == case_id:
            return c
    raise ExportError(f"no case {case_id!r} in {run.path} (its cases: {', '.join(c.id for c in run.cases)})")


def _number(plan, case, call_id):
    """The number (0 = first measured call) of a call id in a case's plan."""
    k = int(np.searchsorted(plan.call_ids, np.uint64(call_id)))
    if k >= len(plan.call_ids) or int(plan.call_ids[k]) != int(call_id):
        raise ExportError(f"case {case.id} has no measured call with id {call_id}")
    return k


def _rebuild(case, plan, first, end):
    """(call ids asked for, call ids rebuilt, {row: Row}, user events, kernel events) of the measured
    calls first..end-1: the rows from the events of those calls' time alone, by the analysis' own rules
    (rpcs._build), so that a call costs what its window costs, not the whole case."""
    n = len(plan.call_ids)
    if not n:
        raise ExportError(f"case {case.id} has no measured calls in its user trace")
    if first < 0 or end > n or first >= end:
        raise ExportError(f"case {case.id} has calls 0 to {n - 1}; asked for "
                          + (f"call {first}" if end == first + 1 else f"calls {first}:{end - 1}"))
    lo = hi = None
    # Real hosts (a trace per host, two clocks): the whole capture, as the analysis rebuilds them.
    if len(case.stored("ust")) == 1 and not (case.has_kernel() and len(case.stored("kernel")) > 1):
        wins = plan.windows(1)[first:end]
        los, his = [w[2] for w in wins], [w[3] for w in wins]
        lo = None if any(v is None for v in los) else min(los)
        hi = None if any(v is None for v in his) else max(his)
    ust = case.span("ust", lo, hi, R.USER_COLUMNS)
    kev = case.span("kernel", lo, hi, R.KERNEL_COLUMNS) if case.has_kernel() else None
    cond = {"client": case.conditions("client"), "server": case.conditions("server")}
    wanted = plan.call_ids[first:end]
    ids, rows = R._build(case, ust, plan.roles, wanted, kev, cond, collections.Counter(), collections.Counter())
    return wanted, ids, rows, ust, kev


# ------------------------------------------------------------------ slices


def _thread_of(side, b, e, cpu, role_threads, call_events):
    """The thread of the case a step occurrence of one side ran for: the one thread of that role, or
    of several the one with user events of the call inside the occurrence, on its CPU, or at all."""
    threads = role_threads.get(side) or []
    if len(threads) == 1:
        return threads[0]
    ts, tid, ecpu = call_events
    for m in ((ts >= b) & (ts <= e), ecpu == cpu, np.ones(len(ts), bool)):
        hit = [t for t in np.unique(tid[m]).tolist() if t in threads]
        if hit:
            return hit[0]
    return threads[0] if threads else None


def _lanes(slices):
    """Give each slice of one thread the first lane where it nests (lane 0: the thread's own track):
    in time order each lane keeps a stack of the ends of the slices still open on it."""
    lanes = []
    for s in sorted(slices, key=lambda s: (s.begin, -s.end)):
        for k, stack in enumerate(lanes):
            while stack and stack[-1] <= s.begin:
                stack.pop()
            if not stack or s.end <= stack[-1]:
                stack.append(s.end)
                s.lane = k
                break
        else:
            lanes.append([s.end])
            s.lane = len(lanes) - 1
    return len(lanes)


def _step_slices(rows, numbers, ids, role_threads, ust_calls):
    out, missing = [], {}
    for r, (num, cid) in enumerate(zip(numbers, ids)):
        ev = ust_calls.get(int(cid), (np.zeros(0, np.int64),) * 3)
        gone = []
        for name in R.ROW_ORDER:
            row = rows[name]
            if row.status[r] == R.MISSING:
                gone.append(name)
            if row.status[r] != R.MEASURED:
                continue
            occ = row.occurrences(r)
            for k, (b, e, cpu) in enumerate(occ):
                tid = _thread_of(_SIDE[name], b, e, cpu, role_threads, ev)
                if tid is None:
                    continue
                args = {"step": name, "call": num, "call_id": int(cid), "cpu": int(cpu)}
                if len(occ) > 1:
                    args["occurrence"] = f"{k + 1} of {len(occ)}"
                out.append(_Slice(tid, int(b), int(e), f"{name} {_NAMES.get(name, '')}".strip(), args))
        if gone:
            missing[num] = gone
    return out, missing


# ------------------------------------------------------------------ kernel events


def _kernel_name(kind, raw):
    k = KIND_NAME.get(kind, "other")
    if k == "syscall_entry":
        return f"sys_enter_{raw}"
    if k == "syscall_exit":
        return f"sys_exit_{raw}"
    return raw


def _instants(kev, lo, hi, cpus, threads):
    """Instants of the kernel events in [lo, hi] on the given CPUs (or naming a thread of the case),
    with the flows between them: packets and wake-ups."""
    if kev is None or not len(kev):
        return []
    ts = np.asarray(kev.ts).astype(np.int64)
    cols = {c: np.asarray(getattr(kev, c))
            for c in ("kind", "cpu", "tid", "tid2", "state", "vec", "skb", "dev", "name")}
    own = np.isin(cols["tid"], list(threads)) | np.isin(cols["tid2"], list(threads))
    sel = np.nonzero((ts >= lo) & (ts <= hi) & (np.isin(cols["cpu"], list(cpus)) | own))[0]
    out, sent, waking = [], {}, {}
    flow = iter(range(1, 1 << 62))
    for i in sel.tolist():
        kind, cpu, tid, tid2 = int(cols["kind"][i]), int(cols["cpu"][i]), int(cols["tid"][i]), int(cols["tid2"][i])
        name = _kernel_name(kind, kev.names[int(cols["name"][i])])
        args = {"cpu": cpu, "tid": tid}
        where = tid
        if kind == KIND["sched_switch"]:
            args |= {"next_tid": tid2, "prev_state": int(cols["state"][i])}
            where = tid2 if tid2 in threads else tid
        elif kind in (KIND["sched_waking"], KIND["sched_wakeup"]):
            args["wakee_tid"] = tid2
        elif kind in (KIND["softirq_entry"], KIND["softirq_exit"], KIND["softirq_raise"]):
            v = int(cols["vec"][i])
            args["vector"] = SOFTIRQ_NAMES.get(v, str(v))
        skb = int(cols["skb"][i])
        if skb:
            args["skb"] = f"0x{skb:x}"
            d = int(cols["dev"][i])
            if d >= 0 and kind in (KIND["net_xmit"], KIND["net_receive"], KIND["net_queue"], KIND["net_start_xmit"]):
                args["device"] = kev.names[d]
        inst = _Instant(("thread", where) if where in threads else ("cpu", cpu), int(ts[i]), name, args)
        if kind == KIND["net_xmit"] and skb:
            sent[skb] = inst
        elif kind == KIND["net_receive"] and skb in sent:
            src = sent.pop(skb)
            if inst.ts - src.ts <= PACKET_GAP_NS:
                f = next(flow)
                src.flow_out.append(f)
                inst.flow_in.append(f)
        elif kind == KIND["copy_to_user"]:
            sent.pop(skb, None)
        if kind == KIND["sched_waking"] and tid2 in threads:
            waking[tid2] = inst
        elif kind == KIND["sched_switch"] and tid2 in waking:
            src = waking.pop(tid2)
            f = next(flow)
            src.flow_out.append(f)
            inst.flow_in.append(f)
        out.append(inst)
    return out


# ------------------------------------------------------------------ the trace


def _annotations(ev, args):
    for k, v in args.items():
        a = ev.debug_annotations.add()
        a.name = k
        if isinstance(v, bool):
            a.bool_value = v
        elif isinstance(v, int) and v >= 0:
            a.uint_value = v            # call ids use all 64 bits
        elif isinstance(v, int):
            a.int_value = v
        else:
            a.string_value = str(v)


def build_trace(case_id, pids, threads, slices, instants):
    """The Trace message: process and thread track descriptors, then every slice's begin and end and
    every instant, in time order (one packet sequence)."""
    trace = Trace()
    uuid = iter(range(1, 1 << 62))

    def packet():
        p = trace.packet.add()
        p.trusted_packet_sequence_id = SEQUENCE
        if len(trace.packet) == 1:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        return p

    proc_uuid, thread_uuid, lane_uuid, cpu_uuid = {}, {}, {}, {}
    for role in ("client", "server"):
        pid = pids.get(role) or next((v.get("pid") for v in threads.values() if v["role"] == role), 0) or 0
        proc_uuid[role] = next(uuid)
        packet().track_descriptor.CopyFrom(TrackDescriptor(
            uuid=proc_uuid[role], process=ProcessDescriptor(pid=int(pid), process_name=f"rpc-{role} ({case_id})")))
    for tid, v in sorted(threads.items()):
        role = v["role"]
        thread_uuid[tid] = next(uuid)
        pid = pids.get(role) or v.get("pid") or 0
        packet().track_descriptor.CopyFrom(TrackDescriptor(
            uuid=thread_uuid[tid], parent_uuid=proc_uuid[role],
            thread=ThreadDescriptor(pid=int(pid), tid=int(tid),
                                    thread_name=f"{role} {v.get('procname') or ''}".strip())))
    by_thread = collections.defaultdict(list)
    for s in slices:
        by_thread[s.track].append(s)
    for tid, lst in sorted(by_thread.items()):
        for k in range(1, _lanes(lst)):
            lane_uuid[(tid, k)] = next(uuid)
            packet().track_descriptor.CopyFrom(TrackDescriptor(
                uuid=lane_uuid[(tid, k)], parent_uuid=thread_uuid[tid],
                name=f"{threads[tid]['role']} {tid}: overlapping steps {k}"))
    for cpu in sorted({i.track[1] for i in instants if i.track[0] == "cpu"}):
        cpu_uuid[cpu] = next(uuid)
        packet().track_descriptor.CopyFrom(TrackDescriptor(uuid=cpu_uuid[cpu], name=f"CPU {cpu}: other threads"))

    events = []              # (ts, order, TrackEvent): per track a slice's end before a later begin
    order = 0
    for tid, lst in sorted(by_thread.items()):
        for k in {s.lane for s in lst}:
            track = thread_uuid[tid] if k == 0 else lane_uuid[(tid, k)]
            stack = []
            for s in sorted((s for s in lst if s.lane == k), key=lambda s: (s.begin, -s.end)):
                while stack and stack[-1] <= s.begin:
                    events.append((stack.pop(), order, TrackEvent(type=TrackEvent.TYPE_SLICE_END, track_uuid=track)))
                    order += 1
                ev = TrackEvent(type=TrackEvent.TYPE_SLICE_BEGIN, track_uuid=track, name=s.name, categories=["step"])
                _annotations(ev, s.args)
                events.append((s.begin, order, ev))
                order += 1
                stack.append(s.end)
            while stack:
                events.append((stack.pop(), order, TrackEvent(type=TrackEvent.TYPE_SLICE_END, track_uuid=track)))
                order += 1
    for i in instants:
        track = thread_uuid[i.track[1]] if i.track[0] == "thread" else cpu_uuid[i.track[1]]
        ev = TrackEvent(type=TrackEvent.TYPE_INSTANT, track_uuid=track, name=i.name, categories=["kernel"],
                        flow_ids=i.flow_out, terminating_flow_ids=i.flow_in)
        _annotations(ev, i.args)
        events.append((i.ts, order, ev))
        order += 1
    for ts, _, ev in sorted(events, key=lambda x: (x[0], x[1])):
        p = packet()
        p.timestamp = int(ts)
        p.track_event.CopyFrom(ev)
    return trace


def export_calls(run_path, case_id, calls=None, call_id=None, out=None) -> Exported:
    """Write calls of one case as a Perfetto trace: calls, a range of call numbers, or call_id, one call
    by its id. out: the file, or a directory to write CASE-call-N.perfetto-trace in (default: the
    run's export/ directory)."""
    try:
        run = load_run(run_path)
        case = _case(run, case_id)
        plan = R._Plan(case)
        if call_id is not None:
            k = _number(plan, case, call_id)
            calls = range(k, k + 1)
        first, end = calls.start, calls.stop
        wanted, ids, rows, ust, kev = _rebuild(case, plan, first, end)
    except (RunError, TraceError, OSError) as e:
        raise ExportError(str(e)) from None
    if not len(ids):
        raise ExportError(f"case {case.id}: call(s) {first}:{end - 1} lack their c1_begin or c21_end mark "
                          "in the user trace; pick another call")
    numbers = [first + int(np.searchsorted(wanted, c)) for c in ids]
    threads = {int(t): dict(v, role=rl) for t, rl in plan.roles.items() for v in [plan.threads.get(t) or {}]}
    role_threads = collections.defaultdict(list)
    for t, v in sorted(threads.items()):
        role_threads[v["role"]].append(t)
    uts, utid, ucpu, ucid = (np.asarray(getattr(ust, c)) for c in ("ts", "tid", "cpu", "call_id"))
    user = (np.asarray(ust.kind) == KIND["user"]) & np.isin(utid, list(threads))
    ust_calls = {}
    for cid in ids.tolist():
        m = user & (ucid == np.uint64(cid))
        ust_calls[int(cid)] = (uts[m].astype(np.int64), utid[m].astype(np.int64), ucpu[m].astype(np.int64))
    slices, missing = _step_slices(rows, numbers, ids, role_threads, ust_calls)
    lo = min(s.begin for s in slices)
    hi = max(s.end for s in slices)
    cpus = {s.args["cpu"] for s in slices} | {int(c) for _, _, cc in ust_calls.values() for c in cc.tolist()}
    instants = _instants(kev, lo, hi, cpus, threads)
    trace = build_trace(case.id, case.pids, threads, slices, instants)
    name = f"{case.id}-call-{first}" if end == first + 1 else f"{case.id}-calls-{first}-{end - 1}"
    out = Path(out) if out else run.path / "export"
    if out.is_dir() or not out.suffix:
        out = out / f"{name}{SUFFIX}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    tmp.write_bytes(trace.SerializeToString())
    tmp.replace(out)
    return Exported(case.id, out, numbers, [int(c) for c in ids], len(slices), len(instants),
                    sum(len(i.flow_out) for i in instants), missing)


def export_examples(d, out_dir):
    """({case id: Exported}, {case id: why not}) of each case's example call (analysis/rtp.json
    cases[].example_rpc, the call the report draws), written to out_dir/CASE-call-N.perfetto-trace."""
    done, failed = {}, {}
    for c in (d.rtp or {}).get("cases") or []:
        ex = c.get("example_rpc")
        if not ex:
            continue
        try:
            done[c["case"]] = export_calls(d.path, c["case"], call_id=ex["call_id"], out=Path(out_dir))
        except ExportError as e:
            failed[c["case"]] = str(e)
    return done, failed


# ------------------------------------------------------------------ the command


def _calls(args):
    if args.calls is None:
        return None if args.call is None else range(args.call, args.call + 1)
    m = re.fullmatch(r"(\d+):(\d+)", args.calls)
    if not m or int(m.group(2)) < int(m.group(1)):
        raise UserError(f"--calls {args.calls}: give A:B, call numbers with A <= B (both exported)")
    return range(int(m.group(1)), int(m.group(2)) + 1)


def cmd_export(args):
    try:
        ex = export_calls(args.run, args.case, calls=_calls(args), call_id=args.call_id, out=args.out)
    except ExportError as e:
        raise UserError(str(e)) from None
    if args.json:
        emit_json({"case": ex.case, "path": str(ex.path), "calls": ex.calls, "call_ids": ex.call_ids,
                   "slices": ex.slices, "instants": ex.instants, "flows": ex.flows,
                   "missing": {str(k): v for k, v in ex.missing.items()}})
        return 0
    print(f"wrote {ex.path}: {len(ex.calls)} call(s) of {ex.case} ({ex.slices} step slices, {ex.instants} kernel "
          f"events, {ex.flows} flows); open it in ui.perfetto.dev (Open trace file)")
    for k, v in ex.missing.items():
        print(f"  call {k}: steps not found in the traces: {', '.join(v)}")
    return 0


EPILOG = """examples:
  rpcscope export runs/NAME --case udp-maxarg-4016 --call 0        the first measured call
  rpcscope export runs/NAME --case tcp-maxarg-0 --calls 10:19      ten calls in one trace
  rpcscope export runs/NAME --case udp-maxarg-0 --call-id 10531897213003497590
                                                                   the call analysis/rtp.json names
  rpcscope export runs/NAME --case udp-maxarg-0 --call 5 --out /tmp/c5.perfetto-trace --json

Calls are numbered from 0, the first measured call after the warm-up, in the order the client made
them. The trace has the client's and the server's threads as tracks, each step as a slice, the
kernel events as instants and flows for packets and wake-ups. `rpcscope report` exports the call
each round-trip-path diagram draws and links it under the diagram.
"""


def register(subparsers):
    ap = subparsers.add_parser(
        "export", help="write calls of a case as a Perfetto trace (ui.perfetto.dev): steps, kernel events, flows",
        description="Write one call, or a range of calls, of a captured case as a Perfetto trace file.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="runs/NAME", help="a run directory (rpcscope capture)")
    ap.add_argument("--case", required=True, metavar="ID", help="the case, e.g. udp-maxarg-4016")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--call", type=int, metavar="N", help="call number N (0 = the first measured call)")
    which.add_argument("--calls", metavar="A:B", help="calls A to B, both included")
    which.add_argument("--call-id", type=int, metavar="ID", help="the call with this call id (as rtp.json names it)")
    ap.add_argument("--out", metavar="FILE|DIR",
                    help="the file to write, or a directory (a name without a suffix) to write "
                         "CASE-call-N.perfetto-trace in (default runs/NAME/export/)")
    ap.add_argument("--json", action="store_true", help="print what was written as JSON")
    ap.set_defaults(func=cmd_export)
    return ap
