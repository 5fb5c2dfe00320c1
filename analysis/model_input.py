"""What the model takes from a run directory, and from nothing else.

Per transport and size:
    Measured     the untraced run's p50 RTT in the round whose traces were kept (manifest.json
                 cases[].untraced.p50), and half the spread of every round's untraced p50
                 (cases[].repeats.untraced_p50_ns)
    class times  the probe-corrected time of the typical call's round-trip path
                 (analysis/rtp.json cases[].path[].typical_corrected_ns), each segment charged to
                 its unit by the step catalog (tracepoints/steps.toml: a step's `unit`, [split],
                 [segments]); the network's segments are kept apart, the wire being physics
    link         the link the capture ran on (manifest.json testbed.link: rate, MTU)

A size measured but not fitted contributes its Measured only, to judge the prediction.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from rpcscope.rundir import RunDir
from rpcscope.tracepoints import unit_of

from . import network as N
from .model import ModelError, Observations, SizeObservation
from .pathsim import CLASSES


def _load(path, what):
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ModelError(f"{path} not found: {what}") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"{path} is unreadable ({e}): {what}") from None
    if not isinstance(d, dict):
        raise ModelError(f"{path} is not a JSON object: {what}")
    return d


def run_link(manifest):
    """The link a capture ran on: a token bucket where the testbed shaped it, else no serialisation."""
    link = ((manifest.get("testbed") or {}).get("link") or {})
    try:
        return N.Link.of_testbed(link.get("rate_bit"), link.get("mtu"))
    except N.LinkError as e:
        raise ModelError(f"the manifest's link is not usable: {e}") from None


def measured_us(case):
    """(the untraced p50 of the round whose traces were kept, in µs; half the spread of every round's
    untraced p50, in % of it) of a manifest case. The kept round's traced run gave the path the model
    is fitted to, and its untraced run took turns with it, through the same moments of the host;
    the rounds' spread says how far Measured itself moves between identical runs."""
    p50 = (case.get("untraced") or {}).get("p50")
    rounds = [x for x in ((case.get("repeats") or {}).get("untraced_p50_ns") or []) if x]
    if not p50 and rounds:
        p50 = statistics.median(rounds)
    if not p50:
        return None, None
    spread = (max(rounds) - min(rounds)) / 2 / p50 * 100 if len(rounds) > 1 else None
    return p50 / 1000, spread


def class_times(path_rows):
    """(class -> µs, network µs, path µs, labels the catalog does not know) of one case's typical
    path (rtp.json path rows)."""
    out = {c: 0.0 for c in CLASSES}
    net, total, unknown = 0.0, 0.0, []
    for r in path_rows:
        v = r.get("typical_corrected_ns")
        if v is None:
            continue
        us = v / 1000
        total += us
        unit = unit_of(r["segment"])
        if unit == "network":
            net += us
        elif unit in out:
            out[unit] += us
        else:
            unknown.append(r["segment"])
            out["call"] += us
    return out, net, total, unknown


def observations(run_dir, transport, proc=None):
    """Observations of one transport of a run (analysis/rtp.json needed: `rpcscope rtp RUN`)."""
    run = RunDir(run_dir)
    man = _load(run.manifest_path, "not a run directory (rpcscope capture writes it)")
    rtp = _load(run.rtp_json, f"run `rpcscope analyze {run.path}` and `rpcscope rtp {run.path}` first")
    cases = [c for c in man.get("cases") or [] if isinstance(c, dict) and c.get("transport") == transport]
    if proc:
        cases = [c for c in cases if c.get("proc") == proc]
    if not cases:
        raise ModelError(f"{run.path}: no {transport} case{f' of {proc}' if proc else ''} in the manifest")
    procs = {c.get("proc") for c in cases}
    if len(procs) > 1:
        raise ModelError(f"{run.path}: {transport} cases of several procedures ({', '.join(sorted(procs))}): "
                         f"choose one with --proc")
    proc = procs.pop()
    paths = {c.get("case"): c.get("path") or [] for c in rtp.get("cases") or [] if isinstance(c, dict)}
    sizes, unknown, no_path = {}, set(), []
    for c in cases:
        m, spread = measured_us(c)
        rows = paths.get(c.get("id"))
        if rows:
            cls, net, total, unk = class_times(rows)
            unknown.update(unk)
        else:
            cls, net, total = {}, 0.0, None
            no_path.append(int(c["size"]))
        sizes[int(c["size"])] = SizeObservation(int(c["size"]), m, spread, cls, net, total)
    inputs = {
        "measured": "each size's untraced p50 RTT in the round whose traces were kept (manifest.json)",
        "class_times": "probe-corrected typical-call path segments (analysis/rtp.json), charged to units by "
                       "tracepoints/steps.toml",
        "probe_correction": _probe_source(run, transport),
        "link": "manifest.json testbed.link",
    }
    if unknown:
        inputs["unclassified_segments"] = (f"charged to the per-call unit: {', '.join(sorted(unknown))} "
                                           f"(no entry in tracepoints/steps.toml [segments])")
    if no_path:
        inputs["sizes_without_path"] = sorted(no_path)
    return Observations(transport, proc, run_link(man), sizes, str(run.path), inputs)


def _probe_source(run, transport):
    """How the path's events were priced (analysis/probe.json), in words."""
    try:
        t = (json.loads(run.probe_json.read_text()).get("transports") or {}).get(transport) or {}
    except (OSError, ValueError, AttributeError):
        t = {}
    if not t:
        return "no in-situ probe calibration: the loopback calibration's per-event costs"
    return (f"{t.get('source', 'in-situ')}: user event {t.get('ust_event_ns')} ns, kernel events "
            f"{t.get('kernel_event_ns')} ns (analysis/probe.json)")
