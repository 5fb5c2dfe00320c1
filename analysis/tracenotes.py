"""What is wrong with a run's traces, one note each, naming the file and what to do.

The readers (traceread) keep every problem they meet in the case's `problems` (steps.json
rtt[].problems) and go on with what still decodes; this module turns them, and what the run
directory lacks (a case's user or kernel trace, a case the capture did not finish), into notes
that `rpcscope analyze` prints and steps.json keeps as `trace_problems`:

    notes = trace_notes(run, rtts, kernel=True)
    for n in notes:
        print(note_line(n))    # "udp-maxarg-0 ust: runs/x/cases/.../rpcs_ust_0: truncated: ... re-capture ..."
"""
from dataclasses import asdict, dataclass

from rpcscope.rundir import RunDir

RECAPTURE = "re-capture the case (`rpcscope capture ... --replace`) for figures of every call"


@dataclass
class TraceNote:
    case: str
    trace: str           # "ust", "kernel", or "run" (the manifest, the case's directory)
    what: str            # truncated, corrupt, metadata, missing, no_trace, lost_events, not_finished
    file: str
    message: str
    fix: str

    def as_dict(self):
        return asdict(self)


def note_line(n):
    """One line for the terminal: case, trace, file, what happened, what to do."""
    where = f"{n.case} {n.trace}" if n.trace != "run" else n.case
    return f"{where}: {n.file}: {n.message}; {n.fix}"


def _from_problem(case_id, p, case_dir):
    trace = p.get("trace") or "run"
    what = p.get("what")
    file = p.get("file") or p.get("stream") or str(case_dir / trace)
    msg = " ".join(str(p.get("message") or "").split())
    for quoted in (f"'{file}'", f"`{file}`", file):     # the file is named once, in front
        msg = msg.replace(quoted, "it")
    msg = msg if len(msg) <= 240 else msg[:237] + "..."
    kept = p.get("events_kept")
    if what == "truncated":
        how = msg.split("cut short: ", 1)[1] if "cut short: " in msg else "it ends inside a packet"
        return TraceNote(case_id, trace, what, file,
                         f"the stream is cut short ({how}); {kept} events kept from its whole packets",
                         "the tracer stopped while writing it (a capture killed, a full disk); the calls it lost are "
                         "left out: " + RECAPTURE)
    if what == "metadata":
        lost = p.get("streams_lost")
        return TraceNote(case_id, trace, what, file,
                         f"invalid CTF metadata: {msg}"
                         + (f" (the trace's {lost} stream(s) are not read)" if lost else ""),
                         "restore the metadata file or " + RECAPTURE)
    if what == "corrupt" and "no metadata file" in msg:
        return TraceNote(case_id, trace, "no_trace", file,
                         "no CTF trace under it (no metadata file: its host directory is missing or empty)",
                         RECAPTURE)
    if what == "corrupt":
        return TraceNote(case_id, trace, what, file,
                         f"the stream does not decode ({msg})" + (f"; {kept} events kept" if kept is not None else ""),
                         RECAPTURE)
    if what == "missing":
        return TraceNote(case_id, trace, what, file, f"the {'user' if trace == 'ust' else trace} trace is missing",
                         "the capture did not record it: " + RECAPTURE)
    if what in ("discarded_events", "discarded_packets"):
        return TraceNote(case_id, trace, "lost_events", file,
                         f"the tracer {what.replace('_', ' ')}: {p.get('count')} (its buffers were full)",
                         "calls missing events are left out; capture fewer --calls, or on a less loaded host")
    if what == "lossy":
        return TraceNote(case_id, "run", "lost_events", file,
                         "the capture counted lost events or packets (manifest cases[].losses)",
                         "calls missing events are left out; capture fewer --calls, or on a less loaded host")
    return None


def trace_notes(run, rtts, kernel=True):
    """[TraceNote] of a run's analysed cases (rtts: steps' rtt rows, with their problems) and of the
    cases the capture did not finish."""
    notes = []
    by_id = {c.id: c for c in run.cases}
    collector = run.manifest.get("kernel_collector")
    for d in rtts:
        case = by_id.get(d["case"])
        if case is None:
            continue
        if not case.dir.is_dir():
            notes.append(TraceNote(case.id, "run", "missing", str(case.dir), "the case's directory is missing",
                                   "the capture did not write it, or it was moved: " + RECAPTURE))
            continue
        lossy_seen = False
        for p in d.get("problems") or []:
            if p.get("what") == "lossy":
                if lossy_seen:
                    continue
                p = dict(p, file=str(RunDir(run.path).manifest_path))
            n = _from_problem(case.id, p, case.dir)
            if n is not None:
                lossy_seen = lossy_seen or n.what == "lost_events"
                notes.append(n)
        if kernel and collector not in (None, "none") and not case.has_kernel():
            notes.append(TraceNote(case.id, "kernel", "missing", str(case.dir / "kernel"),
                                   f"the kernel trace is missing (the capture's kernel collector: {collector})",
                                   "the kernel-bounded steps are missing for every call: " + RECAPTURE +
                                   ", or analyse with --no-kernel for the user marks alone"))
    for case in run.cases:
        if not case.complete:
            notes.append(TraceNote(case.id, "run", "not_finished", str(RunDir(run.path).manifest_path),
                                   "the capture did not finish this case (cases[].complete is false): not analysed",
                                   "re-capture the run for its figures"))
    return notes
