"""The --uprobe functions of a target case as steps: each function's entry-to-return intervals per
thread (collectors/uprobes.py), given to the calls of the kernel-only analysis (analysis/kernelonly.py)
and placed on their path: enclosing the call (a client's call function: its time before the first send
and after the last receive, which the kernel cannot see), or inside one of the steps K1..K11.

    got = intervals(prog_events, probes)                             # each probe's entry-to-return intervals
    rows = summarize(got, probes, calls, program_p50_us)             # [dict], one per probe
    symbol = attach_edges(got, probes, calls)                        # each call's KC1, KC2 (Call.edges)
"""
import bisect
import collections
import statistics

from rpcscope.tracepoints.targetsteps import edges, on_path

PATH_IDS = tuple(s.id for s in on_path())
BEFORE, AFTER = (s.id for s in edges())


def _per_call(got, calls):
    """{call index: [(entry, return)]}: each interval given to the call whose reply's receive ends at or after
    its entry and after the call before it ended."""
    ends = [c.t[-1] for c in calls]
    per = collections.defaultdict(list)
    for _tid, a, b in got:
        k = bisect.bisect_left(ends, a)
        if k < len(calls) and (k == 0 or a > ends[k - 1]):
            per[k].append((a, b))
    return per


def intervals(prog_events, probes):
    """{event: [(tid, entry, return)]} of every probe, entry and return paired per thread (innermost first)."""
    entry = {p["event"]: p["event"] for p in probes}
    ret = {p["event"] + "__return": p["event"] for p in probes}
    open_, out = collections.defaultdict(list), collections.defaultdict(list)
    for ts, name, tid, _f in prog_events:
        if name in entry:
            open_[(tid, name)].append(ts)
        elif name in ret:
            stack = open_.get((tid, ret[name]))
            if stack:
                out[ret[name]].append((tid, stack.pop(), ts))
    return out


def _where(t, a, b):
    if a <= t[0] and b >= t[-1]:
        return "encloses the call"
    if b <= t[0]:
        return "before the first send"
    if a >= t[-1]:
        return "after the last receive"
    k = bisect.bisect_right(t, a) - 1
    return f"inside {PATH_IDS[max(0, min(k, len(PATH_IDS) - 1))]}"


def _p50(v):
    return round(statistics.median(v) / 1e3, 3) if v else None


def summarize(got, probes, calls, program_p50_us):
    """One row per probe: its hits, the calls it was seen in, where on the path it falls, its time per call.
    got: intervals(...)."""
    if not probes or not calls:
        return []
    rows = []
    for p in probes:
        per = _per_call(got.get(p["event"], []), calls)
        where = collections.Counter()
        total, before, after, rtt = [], [], [], []
        for k, ivs in per.items():
            t = calls[k].t
            total.append(sum(b - a for a, b in ivs))
            for a, b in ivs:
                w = _where(t, a, b)
                where[w] += 1
                if w == "encloses the call":
                    before.append(t[0] - a)
                    after.append(b - t[-1])
                    rtt.append(b - a)
        r50 = _p50(rtt)
        rows.append({"step": p["step"], "symbol": p["shown"], "binary": p["binary"],
                     "hits": len(got.get(p["event"], [])), "calls_with_it": len(per), "calls": len(calls),
                     "where": where.most_common(1)[0][0] if where else "not hit during the calls",
                     "per_call_p50_us": _p50(total), "before_first_send_p50_us": _p50(before),
                     "after_last_receive_p50_us": _p50(after), "call_rtt_p50_us": r50,
                     "call_rtt_vs_program_%": round(100 * (r50 - program_p50_us) / program_p50_us, 1)
                     if r50 and program_p50_us else None})
    return rows


def attach_edges(got, probes, calls):
    """Give each call its edges (Call.edges: KC1 from the entry of the function that encloses it to its
    first send, KC2 from its last receive's return to the function's return) and return that function's
    name, or None. Of several probed functions that enclose calls, the outermost (the longest median
    entry-to-return) is the call's: the program's own call function encloses its library's. got:
    intervals(...)."""
    best, best_len = None, 0
    for p in probes:
        spans = {}
        for k, ivs in _per_call(got.get(p["event"], []), calls).items():
            t = calls[k].t
            outer = [(a, b) for a, b in ivs if a <= t[0] and b >= t[-1]]
            if outer:
                spans[k] = min(a for a, _ in outer), max(b for _, b in outer)
        if spans:
            length = statistics.median(b - a for a, b in spans.values())
            if length > best_len:
                best, best_len = (p, spans), length
    if best is None:
        return None
    p, spans = best
    for k, (a, b) in spans.items():
        t = calls[k].t
        calls[k].edges = {BEFORE: t[0] - a, AFTER: b - t[-1]}
    return p["shown"]
