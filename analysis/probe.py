"""The probe effect where it is measured: the effective cost of one event of each class on the
round-trip path, from the capture's in-situ calibration (collectors/capture.py calibrate_in_situ).

The capture ran, between the testbed's hosts with the run's placement, rounds of the same call at
two sizes (0 and a large one) untraced, with user events only, and with user and kernel events, and
kept the last traced run's traces of each size. Here the round-trip path of every call of those
traces is walked (analysis/rtp.py) and the events on it counted per class: user, kernel network
device (one per packet per device, cheap), other kernel (syscalls, scheduler, softirq). Then, with
p50 differences d_user(s) = user-only - untraced and d_kernel(s) = user+kernel - user-only,

    d_user(s)   = n_user(s) x c_user                          (least squares over the sizes)
    d_kernel(s) = n_net(s) x c_net + n_other(s) x c_other     (two sizes, two unknowns)

Those costs are what the analysis charges to the path of the run's cases (Case.calibration). An
event off the path costs the RTT nothing; what an event costs beyond its own instructions where the
call really runs (tracer daemons sharing the CPUs, cache effects) is folded into these costs, which
the loopback calibration (each host alone, all events on the path) cannot see. When the two-size
system has no positive solution the kernel classes share one cost (size 0 alone), and the result
says so. Cached in runs/NAME/analysis/probe.json.
"""
import json

import numpy as np

PROBE_FORMAT = "rpcscope-probe/1"


def in_situ(run):
    """{"source": "in-situ", "ust_event_ns", "kernel_event_ns": {"net", "other"}, ...} or None when the
    run has no usable in-situ calibration (then the manifest's loopback calibration is used)."""
    meta = run.manifest.get("calibration_in_situ")
    if not meta or not meta.get("complete") or not meta.get("sizes"):
        return None
    sizes = {int(k): v for k, v in meta["sizes"].items()
             if not v.get("lossy") and (run.path / v["dir"] / "ust").is_dir() and (run.path / v["dir"] / "kernel").is_dir()}
    if 0 not in sizes:
        return None
    cache = run.out_dir / "probe.json"
    key = {str(k): {"p50": v["p50_median_ns"], "dir": v["dir"], "pids": v.get("pids")} for k, v in sizes.items()}
    try:
        got = json.loads(cache.read_text())
        if got.get("format") == PROBE_FORMAT and got.get("key") == key:
            return got
    except (OSError, ValueError):
        pass
    from .rtp import analyze_case
    from .run import Case
    per = {}
    for size, v in sorted(sizes.items()):
        case = Case(run, {"id": f"calibration-in-situ-{size}", "transport": meta["transport"], "proc": meta["proc"],
                          "size": size, "calls": meta["calls"], "warmup": meta["warmup"], "dir": v["dir"],
                          "pids": v.get("pids") or {}})
        res, _ = analyze_case(case)
        ev = np.array([p["path_events"] for p in res["per_rpc"] if p.get("ok")], float)
        if len(ev) < 50:
            continue
        med = v["p50_median_ns"]
        n = np.median(ev, axis=0)
        per[size] = {"rpcs_walked": len(ev), "path_events_per_call": {"ust": n[0], "kernel_net": n[1],
                                                                       "kernel_other": n[2]},
                     "d_user_ns": med["ust"] - med["untraced"], "d_kernel_ns": med["both"] - med["ust"],
                     "p50_ns": med, "spread_ns": {k: [min(x), max(x)] for k, x in v["p50_ns"].items()}}
    if 0 not in per:
        return None
    c_user, c_net, c_other, method = solve(per)
    out = {"format": PROBE_FORMAT, "key": key, "source": "in-situ", "method": method,
           "sizes": {str(k): v for k, v in per.items()}, "rounds": meta.get("rounds"),
           "ust_event_ns": round(c_user, 1) if c_user is not None else None,
           "kernel_event_ns": {"net": round(c_net, 1), "other": round(c_other, 1)} if c_net is not None else None}
    run.out_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1, default=float) + "\n")
    return out


def solve(per):
    """(c_user, c_net, c_other, method) from {size: {"path_events_per_call": {"ust", "kernel_net",
    "kernel_other"}, "d_user_ns", "d_kernel_ns"}} (size 0 required); see the module docstring."""
    nu = np.array([p["path_events_per_call"]["ust"] for p in per.values()], float)
    du = np.array([p["d_user_ns"] for p in per.values()], float)
    c_user = float(du @ nu / (nu @ nu)) if nu @ nu else None
    method = "two sizes: net and other kernel events solved separately"
    c_net = c_other = None
    if len(per) >= 2:
        A = np.array([[p["path_events_per_call"]["kernel_net"], p["path_events_per_call"]["kernel_other"]]
                      for p in per.values()], float)
        dk = np.array([p["d_kernel_ns"] for p in per.values()], float)
        if abs(np.linalg.det(A.T @ A)) > 1e-9:
            sol = np.linalg.lstsq(A, dk, rcond=None)[0]
            if sol.min() > 0:
                c_net, c_other = float(sol[0]), float(sol[1])
    if c_net is None:
        p0 = per[0]["path_events_per_call"]
        nk = p0["kernel_net"] + p0["kernel_other"]
        c_net = c_other = per[0]["d_kernel_ns"] / nk if nk else None
        method = "one kernel cost (size 0 alone): the two-size system had no positive solution"
    return c_user, c_net, c_other, method
