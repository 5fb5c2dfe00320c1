"""The --uprobe functions of a target case as steps: each function's entry-to-return intervals per
thread (collectors/uprobes.py), given to the calls of the kernel-only analysis (analysis/kernelonly.py)
and placed on their path: enclosing the call (a client's call function: its time before the first send
and after the last receive, which the kernel cannot see), or inside one of the steps K1..K11.

    rows = summarize(prog_events, probes, calls, program_p50_us)     # [dict], one per probe
"""
import bisect
import collections
import statistics

from rpcscope.tracepoints.targetsteps import on_path

PATH_IDS = tuple(s.id for s in on_path())


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


def summarize(prog_events, probes, calls, program_p50_us):
    """One row per probe: its hits, the calls it was seen in, where on the path it falls, its time per call."""
    if not probes or not calls:
        return []
    got = intervals(prog_events, probes)
    ends = [c.t[-1] for c in calls]
    rows = []
    for p in probes:
        per = collections.defaultdict(list)
        for tid, a, b in got.get(p["event"], []):
            k = bisect.bisect_left(ends, a)          # the call whose receive ends at or after the entry
            if k < len(calls) and (k == 0 or a > ends[k - 1]):
                per[k].append((a, b))
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
