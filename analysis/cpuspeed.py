"""How much of their time the testbed's CPUs lost while a capture ran, from its CPU speed checks
(rpc-cpuspeed, rpc/cpuspeed.h; manifest.json cpu_speed, made by collectors/capture.py cpu_speed_check
before the capture's calls and after every sweep of the sizes).

A check times slices of one fixed chain of multiply-adds on each CPU. The fastest slice a CPU ran in the
whole capture is what the work costs at its full pace; a check's lost share is the part of its time
above that, 100 x (sum of its slices - slices x fastest) / sum of its slices. The guest sees the causes
nowhere else (this VM reports no steal time): the host running the core at a lower clock, the
hypervisor running something else on it (pauses of milliseconds, single slices up to 23 times the
fastest), a busy sibling thread; the guest's own interrupts take microseconds of a ~0.7 ms slice. On
the project's VM both CPUs' fastest slices move together between checks, in steps (714, 667 and
625 us), and checks lose a median of about 12 % (up to ~30 %) while the testbed's round trips move by
10-25 % from one run to the next. Over loopback, pinned, a run's p50 followed the checks around it
only in part (correlation 0.59 over 30 runs) and moved ~2.5 times as far in relative terms (UDP 4016
32-50 us against slices of 670-780 us), so the share is a sign of the host's state, not a correction
for it.
"""
import math
import statistics


def cpu_losses(manifest):
    """{"checks": the checks that ran, "errors": [(when, why)], "cpus": {cpu: {"fastest_slice_ns",
    "lost_pct": [one a check, in order], "median_lost_pct", "max_lost_pct", "worst_check": its "when",
    "max_slice_ratio": the slowest slice over the fastest}}}, or None where the capture made no check (an
    older capture)."""
    speed = (manifest or {}).get("cpu_speed")
    if not speed:
        return None
    checks = [c for c in speed.get("checks", []) if "cpus" in c]
    errors = [(c.get("when"), c.get("error")) for c in speed.get("checks", []) if "cpus" not in c]
    by_cpu = {}
    for check in checks:
        for c in check["cpus"]:
            if c.get("slices"):
                by_cpu.setdefault(c["cpu"], []).append((check["when"], c))
    cpus = {}
    for cpu, seen in sorted(by_cpu.items()):
        fastest = min(c["min_ns"] for _, c in seen)
        lost = [100.0 * (c["sum_ns"] - c["slices"] * fastest) / c["sum_ns"] for _, c in seen]
        worst = max(range(len(lost)), key=lost.__getitem__)
        cpus[cpu] = {"fastest_slice_ns": fastest, "lost_pct": [round(x, 2) for x in lost],
                     "median_lost_pct": round(statistics.median(lost), 2), "max_lost_pct": round(lost[worst], 2),
                     "worst_check": seen[worst][0],
                     "max_slice_ratio": round(max(c["max_ns"] for _, c in seen) / fastest, 2)}
    return {"checks": len(checks), "errors": errors, "cpus": cpus}


def describe(losses):
    """The run summary's sentence for cpu_losses' result."""
    if losses is None:
        return None
    parts = [f"CPU {cpu} lost a median {c['median_lost_pct']:.1f} % of a check's time to its fastest pace (at most "
             f"{c['max_lost_pct']:.1f} %, {c['worst_check']}), its slowest slice {c['max_slice_ratio']:.1f}x "
             f"its fastest ({c['fastest_slice_ns'] / 1e3:.0f} us)" for cpu, c in losses["cpus"].items()]
    text = "; ".join(parts) if parts else "no check ran"
    text += (f" ({losses['checks']} checks of a fixed loop, before the calls and after every sweep; time lost: "
             f"a check's slices' time beyond the CPU's fastest slice's pace, the host's doing: a lower clock, the "
             f"hypervisor running something else on the core, a busy sibling thread)")
    if losses["errors"]:
        text += f"; {len(losses['errors'])} check(s) failed: " + "; ".join(f"{w}: {e}" for w, e in losses["errors"])
    return text


def worst_loss(losses):
    """(the largest lost share of any check of any CPU, the median of the CPUs' median shares), or None."""
    if not losses or not losses["cpus"]:
        return None
    cpus = losses["cpus"].values()
    return max(c["max_lost_pct"] for c in cpus), statistics.median(c["median_lost_pct"] for c in cpus)


def pace_response(manifest):
    """How far the capture's runs followed their CPU's pace (rpc-client --pace-slices: each run's
    repeats.<kind>_pace_ns): {transport: {kind: {"runs", "corr", "elasticity", "pace_range_pct",
    "p50_range_pct"}}}, over every run of every case, each run's p50 and pace taken relative to its
    case's median of that kind (logarithms), so that sizes pool. corr: their correlation; elasticity:
    the least-squares slope, % of the p50 per % of the pace (1: the round trip slows exactly as the
    loop does); the ranges: the middle 80 % of the relative figures, in %. {} where no run carries a
    pace (its client timed none)."""
    import numpy as np
    out = {}
    for case in (manifest or {}).get("cases", []):
        rep = case.get("repeats") or {}
        for key, paces in rep.items():
            if not key.endswith("_pace_ns"):
                continue
            kind = key[:-len("_pace_ns")]
            p50s = rep.get(f"{kind}_p50_ns") or []
            pairs = [(p, q) for p, q in zip(paces, p50s) if p and q]
            if len(pairs) < 3:
                continue
            mp, mq = statistics.median(p for p, _ in pairs), statistics.median(q for _, q in pairs)
            acc = out.setdefault(case["transport"], {}).setdefault(kind, ([], []))
            for p, q in pairs:
                acc[0].append(math.log(p / mp))
                acc[1].append(math.log(q / mq))
    result = {}
    for transport, kinds in out.items():
        for kind, (x, y) in kinds.items():
            x, y = np.array(x), np.array(y)
            if len(x) < 3 or not x.any():
                continue
            corr = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else None
            result.setdefault(transport, {})[kind] = {
                "runs": int(len(x)), "corr": None if corr is None else round(corr, 2),
                "elasticity": round(float((x @ y) / (x @ x)), 2),
                "pace_range_pct": round(100 * float(np.expm1(np.percentile(x, 90) - np.percentile(x, 10))), 1),
                "p50_range_pct": round(100 * float(np.expm1(np.percentile(y, 90) - np.percentile(y, 10))), 1)}
    return result


def describe_pace(response):
    """The run summary's sentence for pace_response's result, or None."""
    if not response:
        return None
    parts = []
    for transport, kinds in response.items():
        for kind, r in kinds.items():
            parts.append(f"{transport} {kind}: correlation {r['corr']}, {r['elasticity']:.1f} % of the p50 per % "
                         f"of the pace, the pace over {r['pace_range_pct']:.1f} % and the p50s over "
                         f"{r['p50_range_pct']:.1f} % (middle 80 % of {r['runs']} runs)")
    return ("each run's p50 against its CPU's pace (the fastest loop slice rpc-client timed before and after "
            "its calls), both relative to the case's median: " + "; ".join(parts))
