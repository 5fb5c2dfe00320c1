"""The probe effect where it is measured: the effective cost of one event of each class on the
round-trip path, from the capture's in-situ calibration (collectors/capture.py calibrate_in_situ).

The capture ran, between the testbed's hosts with the run's placement, for each transport, rounds of
the same call at three sizes (0, the run's largest and half of it) untraced, with user events only, and with user and
kernel events, and kept the traces of the median traced run of each size. Here the round-trip path of every call of those
traces is walked (analysis/rtp.py) and the events on it counted per class: user, kernel network
device (one per packet per device, cheap), other kernel (syscalls, scheduler, softirq). Then, with
p50 differences d_user(s) = user-only - untraced and d_kernel(s) = user+kernel - user-only,

    d_user(s)   = n_user(s) x c_user                          (least squares over the sizes)
    d_kernel(s) = n_net(s) x c_net + n_other(s) x c_other     (least squares over the sizes)

Those costs are what the analysis charges to the path of the run's cases (Case.calibration). An
event off the path costs the RTT nothing; what an event costs beyond its own instructions where the
call really runs (tracer daemons sharing the CPUs, cache effects) is folded into these costs, which
the loopback calibration (each host alone, all events on the path) cannot see. When the sizes'
system has no positive solution (over TCP the sizes' calls carry about the same events) the kernel
classes share one cost (size 0 alone), and the result says so. One set of costs per transport:
TCP's calls slow down less under tracing than UDP's with about as many events. Cached in
runs/NAME/analysis/probe.json.
"""
import json

import numpy as np

PROBE_FORMAT = "rpcscope-probe/2"


def in_situ(run):
    """{transport: {"source": "in-situ", "ust_event_ns", "kernel_event_ns": {"net", "other"}, ...}} for
    each transport with a usable in-situ calibration ({} when none: the manifest's loopback calibration
    is used). Cached in runs/NAME/analysis/probe.json."""
    cals = run.in_situ_calibrations()
    usable = {}
    for transport, meta in cals.items():
        sizes = {int(k): v for k, v in meta["sizes"].items()
                 if not v.get("lossy") and (run.path / v["dir"] / "ust").is_dir()
                 and (run.path / v["dir"] / "kernel").is_dir()}
        if 0 in sizes:
            usable[transport] = (meta, sizes)
    if not usable:
        return {}
    cache = run.out_dir / "probe.json"
    key = {t: {str(k): {"p50": v["p50_median_ns"], "dir": v["dir"], "pids": v.get("pids")} for k, v in sz.items()}
           for t, (_, sz) in usable.items()}
    try:
        got = json.loads(cache.read_text())
        if got.get("format") == PROBE_FORMAT and got.get("key") == key:
            return got["transports"]
    except (OSError, ValueError):
        pass
    out = {}
    for transport, (meta, sizes) in usable.items():
        r = _calibrate(run, meta, sizes)
        if r:
            out[transport] = r
    run.out_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"format": PROBE_FORMAT, "key": key, "transports": out}, indent=1, default=float) + "\n")
    return out


def _calibrate(run, meta, sizes):
    from .rtp import analyze_case
    from .run import Case
    per = {}
    for size, v in sorted(sizes.items()):
        case = Case(run, {"id": f"calibration-in-situ-{meta['transport']}-{size}", "transport": meta["transport"],
                          "proc": meta["proc"], "size": size, "calls": meta["calls"], "warmup": meta["warmup"],
                          "dir": v["dir"], "pids": v.get("pids") or {}})
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
    return {"source": "in-situ", "transport": meta["transport"], "method": method,
            "sizes": {str(k): v for k, v in per.items()}, "rounds": meta.get("rounds"),
            "ust_event_ns": round(c_user, 1) if c_user is not None else None,
            "kernel_event_ns": {"net": round(c_net, 1), "other": round(c_other, 1)} if c_net is not None else None}


def solve(per):
    """(c_user, c_net, c_other, method) from {size: {"path_events_per_call": {"ust", "kernel_net",
    "kernel_other"}, "d_user_ns", "d_kernel_ns"}} (size 0 required); see the module docstring."""
    nu = np.array([p["path_events_per_call"]["ust"] for p in per.values()], float)
    du = np.array([p["d_user_ns"] for p in per.values()], float)
    c_user = float(du @ nu / (nu @ nu)) if nu @ nu else None
    method = f"{len(per)} sizes: net and other kernel events solved separately"
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
        method = "one kernel cost (size 0 alone): the sizes' system had no positive solution"
    return c_user, c_net, c_other, method
