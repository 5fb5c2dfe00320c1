"""Everything a report shows about one run, read from the run directory, each value with its source.

    from rpcscope.reports.data import load
    d = load("runs/NAME")
    d.summary          [{"item", "value", "source"}]
    d.steps            analysis/steps.json rows (or [] and d.missing says how to make them)
    d.rtt              analysis/steps.json "rtt" rows
    d.models           {transport: (file name, model dict)} of analysis/model-TRANSPORT.json
                       (`rpcscope model RUN --transport T` writes one per transport)
    d.verifications    {transport: document} of analysis/verify-TRANSPORT.json (`rpcscope verify PRED RUN`)
    d.rtp              analysis/rtp.json (dict) or None
    d.latency(case)    per-case latency samples / percentiles for the distribution figures

Nothing here writes. It reads the run's outputs (rpcscope/rundir.py names them); the analysis's readings of
the manifest (path_shape, cpu_losses, ...) are called for their words, and per_rpc=True reads every
RPC's traced RTT from the per-RPC table `rpcscope analyze` writes (analysis/rpcs.jsonl.gz).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rpcscope.analysis.clocksync import summary_line
from rpcscope.analysis.cpuspeed import cpu_losses, describe, describe_pace, pace_response
from rpcscope.analysis.rpctable import RpcTableError, read_rpc_table
from rpcscope.analysis.run import path_shape, valid_histogram
from rpcscope.analysis.wakeup import run_wake_costs
from rpcscope.rundir import (
    ANALYSIS,
    MODEL_FORMAT,
    PROBE_FORMAT,
    RPCS_TABLE,
    RunDir,
    in_situ_calibrations,
    sweeps_summary,
)
from rpcscope.tracepoints import span_of

from . import crosscheck_section, verify_section

# "(analysis/clocksync.py)" or "(analysis/run.py path_shape; ...)" in a value an analysis module words
CODE_PATH = re.compile(r"\s*\((?:[\w-]+/)+[\w-]+\.(?:py|c)\b[^()]*\)")
RPCS_SOURCE = f"{ANALYSIS}/{RPCS_TABLE}"
CALL_ROW = span_of("call")          # the RTT row: the call's span of user marks (the catalog's [spans])
PCTS = (("min", 0.0), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))


class ReportError(Exception):
    pass


def _read_json(p):
    try:
        return json.loads(Path(p).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ReportError(f"{p}: unreadable: {e}") from None


@dataclass
class RunData:
    path: Path
    manifest: dict
    steps_json: dict | None
    model: dict | None
    rtp: dict | None
    missing: list = field(default_factory=list)      # what is absent and how to make it
    models: dict = field(default_factory=dict)       # transport -> (analysis/ file name, model dict)
    per_rpc: dict = field(default_factory=dict)      # case id -> [traced RTT us] (the per-RPC table)
    per_rpc_source: str = ""
    crosscheck: dict | None = None                    # its kernel-only runs beside its steps (crosscheck_section)
    verifications: dict = field(default_factory=dict)  # transport -> `rpcscope verify` document (verify_section)

    @property
    def probe(self):
        """The in-situ probe calibration the analysis wrote (analysis/probe.json), {} where there is none."""
        got = _read_json(RunDir(self.path).probe_json)
        if not isinstance(got, dict) or got.get("format") != PROBE_FORMAT:
            return {}
        return {"transports": got.get("transports") or {}, "cases": got.get("cases") or {}}

    @property
    def name(self):
        return self.path.name

    @property
    def cases(self):
        return [c for c in self.manifest.get("cases", [])]

    @property
    def steps(self):
        return (self.steps_json or {}).get("steps", [])

    @property
    def rtt(self):
        return (self.steps_json or {}).get("rtt", [])

    # ------------------------------------------------------------ summary
    @property
    def summary(self):
        m = self.manifest
        p = m.get("params", {})
        tb = m.get("testbed", {})
        link = tb.get("link") or {}
        out = []

        def add(item, value, source):
            if isinstance(value, str):      # the figures, not which source file computed them
                value = CODE_PATH.sub("", value)
            if value not in (None, "", [], {}):
                out.append({"item": item, "value": value, "source": source})

        add("run", self.path.name, "the run directory's name")
        add("created / finished", f"{m.get('created', '?')} / {m.get('finished', '?')}",
            "manifest.json created, finished")
        add("complete", f"{m.get('complete')} (interrupted: {m.get('interrupted')})",
            "manifest.json complete, interrupted")
        add("git commit", m.get("git_commit"), "manifest.json git_commit")
        add("procedure, sizes, transports",
            f"{p.get('proc')}; sizes {', '.join(map(str, p.get('sizes', [])))}; {', '.join(p.get('transports', []))}",
            "manifest.json params.proc, params.sizes, params.transports")
        add("calls per case (warm-up)", f"{p.get('calls')} ({p.get('warmup')})",
            "manifest.json params.calls, params.warmup")
        add("testbed", f"{tb.get('kind')} (shared kernel: {tb.get('shared_kernel')}); devices "
            f"{', '.join(tb.get('devices', []))}", "manifest.json testbed.kind, shared_kernel, devices")
        add("link", f"rate {link.get('rate')}, MTU {link.get('mtu')}, loss {link.get('loss')}"
            + (f", kind {link['kind']}" if link.get("kind") else ""), "manifest.json testbed.link")
        for name, h in (m.get("hosts") or {}).items():
            add(f"host {name}", f"{h.get('role')}, {h.get('address')}, CPUs {h.get('cpus')}, {h.get('cpu_model')}, "
                f"kernel {h.get('kernel')}, clocksource {h.get('clocksource')}", f"manifest.json hosts.{name}")
        add("CPU placement", m.get("placement") or p.get("placement"), "manifest.json placement")
        idle = m.get("idle") or {}
        add("idle policy", f"{idle.get('policy', 'not recorded (os)')}: {idle.get('mechanism', '')}; cpuidle driver "
            f"{idle.get('cpuidle_driver')}", "manifest.json idle")
        aslr = m.get("aslr") or {}
        add("address layout", f"ASLR {aslr['setting']}: {aslr.get('how')}" if aslr else
            "not recorded (the kernel's randomized layout, before --aslr)", "manifest.json aslr")
        add("waiting mode", f"client {m.get('wait')}; server {m.get('server_wait')}; server executors "
            f"{m.get('server_executors')} ({'inline' if not m.get('server_executors') else 'pool'})",
            "manifest.json wait, server_wait, server_executors")
        add("kernel collector, clock", f"{m.get('kernel_collector')}, {m.get('clock')}, kernel clock aligned to UST: "
            f"{m.get('kernel_clock_aligned_to_ust')}",
            "manifest.json kernel_collector, clock, kernel_clock_aligned_to_ust")
        # A manifest without params.kernel_events comes from a capture that recorded the full set.
        add("kernel event set", p.get("kernel_events", "full (not recorded)"), "manifest.json params.kernel_events")
        add("tool versions", ", ".join(f"{k} {v}" for k, v in (m.get("tools") or {}).items()), "manifest.json tools")
        readers = {}
        for r in self.rtt:
            if r.get("trace_readers"):
                readers[r["trace_readers"]] = readers.get(r["trace_readers"], 0) + 1
        add("trace readers", "; ".join(f"{v} of {len(self.rtt)} cases: {k}" for k, v in readers.items()),
            "analysis/steps.json rtt[].trace_readers (ctfread: rpcscope's own CTF reader)")
        add("untraced build", p.get("untraced"), "manifest.json params.untraced")
        add("rounds, kept round", sweeps_summary(m.get("sweeps")),
            "manifest.json sweeps; every round's p50s: cases[].repeats")
        shapes = [(c.get("id"), path_shape(c)) for c in m.get("cases") or []]
        counted = [(cid, sh) for cid, sh in shapes if sh]
        if counted:
            other = [f"{cid} (sleeps client/server {sh['untraced']} untraced, {sh['traced']} traced"
                     + (f"; IPIs {sh['untraced_ipi']} against {sh['traced_ipi']}" if "untraced_ipi" in sh else "")
                     + ")" for cid, sh in counted if not sh["same"]]
            add("untraced runs' path", (f"another path than the traced run's at {len(other)} of {len(counted)} "
                                        f"cases: " + "; ".join(other) + " (the kept round). The model "
                                        "charges the extra sleeps and interrupts of the speed level's untraced rounds "
                                        "(their median), and the wake-up right after each interrupt, at the wake-up "
                                        "calibration's costs, in its other-path rows, as many as the middle call pays "
                                        "(see the model section)") if other else
                f"the traced run's path at all {len(counted)} cases (the same sleeps and IPIs per call)",
                "manifest.json cases[].sleeps_per_call")
        wake = run_wake_costs(m)
        cal = m.get("wake_calibration") or {}
        if wake or cal:
            add("wake-up calibration", "; ".join(
                f"reader on the {role}'s CPU: a sleep {c['sleep_us']:.2f} us over a spinning reader, "
                "an interrupt-borne "
                f"wake-up " + (f"{c['ipi_us']:.2f} us more" if c.get("ipi_us") is not None else "not seen")
                + (f", the wake-up right after one {c['after_ipi_us']:+.2f} us ({c.get('after_ipi_source')})"
                   if c.get("after_ipi_us") is not None else
                   f", the wake-up right after one {c['after_ipi_source']}" if c.get("after_ipi_source") else "")
                for role, c in wake.items()) or "; ".join(f"{r}: {v.get('error') or v.get('skipped') or v}"
                                                          for r, v in cal.items()),
                "manifest.json wake_calibration (rpc-wakecal)")
        speed = describe(cpu_losses(m))
        if speed:
            add("CPU time lost", speed, "manifest.json cpu_speed.checks (rpc-cpuspeed)")
        pace = describe_pace(pace_response(m))
        if pace:
            add("rounds against the CPU pace", pace,
                "manifest.json cases[].repeats.<kind>_pace_ns, <kind>_p50_ns")
        add("calibration", ", ".join(f"{h}: UST event {c.get('ust_event_ns')} ns, kernel event "
                                     f"{(c.get('kernel_event_ns') or {}).get('all')} ns"
                                     for h, c in (m.get("calibration") or {}).items()) or "none (corrected = raw)",
            "manifest.json calibration.HOST.ust_event_ns, kernel_event_ns.all")
        ins = in_situ_calibrations(m)
        if (m.get("calibration_in_situ") or {}).get("method") == "per case":
            probe = self.probe
            models = "".join(f"; {t}: {v.get('method')}" for t, v in (probe.get("transports") or {}).items())
            add("in-situ probe calibration", "per transport: every case's path events charged at the costs of a user "
                "and a kernel event solved from the fitted cases' probe effects (traced minus untraced p50) "
                "(analysis/probe.json)" + models,
                "manifest.json calibration_in_situ.method, cases[].untraced, cases[].traced; "
                "analysis/probe.json transports.*.method")
        elif ins:
            add("in-situ probe calibration", "; ".join(
                f"{t} size {z}: p50 untraced {v['p50_median_ns']['untraced'] / 1e3:.2f} us, user events "
                f"{v['p50_median_ns']['ust'] / 1e3:.2f} us, user+kernel {v['p50_median_ns']['both'] / 1e3:.2f} us "
                f"(median of {cal.get('rounds')} rounds)" for t, cal in ins.items() for z, v in cal["sizes"].items())
                + "; costs per event class on the path: analysis/probe.json",
                "manifest.json calibration_in_situ.transports.*.sizes.*.p50_median_ns")
        cs = m.get("clock_sync") or (self.steps_json or {}).get("clock_sync")
        if cs:
            src = ("manifest.json clock_sync" if m.get("clock_sync")
                   else "analysis/steps.json clock_sync, rtt[].clock_sync")
            add("clock sync", cs if isinstance(cs, str) else summary_line(cs) if "cases" in cs else json.dumps(cs), src)
        elif tb.get("shared_kernel"):
            add("clock sync", "not needed: client and server share one kernel clock",
                "manifest.json testbed.shared_kernel")
        else:
            add("clock sync", "not recorded", "manifest.json (no clock_sync)")
        lossy = [c["id"] for c in self.cases if c.get("lossy")]
        losses = {c["id"]: c.get("losses") for c in self.cases if any((c.get("losses") or {}).values())}
        add("losses", "none" if not losses else "; ".join(f"{k}: {v}" for k, v in losses.items()),
            "manifest.json cases[].losses")
        add("lossy cases", ", ".join(lossy) or "none", "manifest.json cases[].lossy")
        incomplete = [c["id"] for c in self.cases if c.get("complete") is False]
        add("incomplete cases (skipped)", ", ".join(incomplete) or "none", "manifest.json cases[].complete")
        excl = {}
        for r in self.rtt:
            for why, n in (r.get("excluded") or {}).items():
                excl[why] = excl.get(why, 0) + n
            for why, n in (r.get("incomplete_by_first_missing_step") or {}).items():
                excl[f"incomplete, first missing {why}"] = excl.get(f"incomplete, first missing {why}", 0) + n
        if self.steps_json:
            add("excluded RPCs", "; ".join(f"{k}: {v}" for k, v in excl.items()) or "none",
                "analysis/steps.json rtt[].excluded, rtt[].incomplete_by_first_missing_step")
        return out

    # ------------------------------------------------------------ latency
    def latency(self, case):
        """{name: {"kind": "samples"|"histogram"|"percentiles", "values": ..., "source": str}}: per-RPC
        samples rebuilt from the traces ([us]), the client's histogram of every measured call
        ({"from_us", "bin_us", "counts", "above"}), or, from clients older than that histogram, its
        percentiles ({pct: us})."""
        out = {}
        cid = case["id"]
        if cid in self.per_rpc:
            out["traced (per RPC, trace)"] = {"kind": "samples", "values": self.per_rpc[cid],
                                              "source": self.per_rpc_source}
        for which in ("untraced", "traced"):
            f = self.path / case.get("dir", f"cases/{cid}") / f"client-{which}.json"
            d = _read_json(f)
            hist = (d or {}).get("rtt_hist")
            if hist and valid_histogram(hist) and hist["counts"]:
                # Every measured call, binned by the client (rpc-client --hist-bin-ns).
                out[f"{which} (client histogram)"] = {
                    "kind": "histogram", "source": f"{f.relative_to(self.path)} rtt_hist",
                    "values": {"from_us": hist["from_ns"] / 1000.0, "bin_us": hist["bin_ns"] / 1000.0,
                               "counts": hist["counts"], "above": hist.get("above", 0)}}
                continue
            if d and d.get("rtt_ns"):
                pc = {k: d["rtt_ns"][k] / 1000.0 for k, _ in PCTS if d["rtt_ns"].get(k) is not None}
                src = f"{f.relative_to(self.path)} rtt_ns.{{min,p50,p90,p99,max}}"
            elif case.get(which):
                pc = {k: case[which][k] / 1000.0 for k, _ in PCTS if case[which].get(k) is not None}
                src = f"manifest.json cases[{cid}].{which}.{{min,p50,p90,p99,max}}"
            else:
                continue
            out[f"{which} (client percentiles)"] = {"kind": "percentiles", "values": pc, "source": src}
        return out


def load(run, per_rpc=False):
    """Read a run directory (and its analysis/ output when present). per_rpc: read every RPC's traced RTT
    (analysis/rpcs.jsonl.gz) for per-RPC traced RTT distributions."""
    path = Path(run)
    rd = RunDir(path)
    manifest = _read_json(rd.manifest_path)
    if manifest is None:
        raise ReportError(f"{path} is not a run directory: no manifest.json (make one with `rpcscope capture`)")
    sj = _read_json(rd.steps_json)
    models = _models(rd)
    rtp = _read_json(rd.rtp_json)
    missing = []
    if sj is None:
        missing.append(f"analysis/steps.json: run `rpcscope analyze {path}` for the per-step tables")
    if not models:
        missing.append(f"analysis/model-udp.json: run `rpcscope model {path} --transport udp` (after analyze and rtp) "
                       f"for the model's table")
    if rtp is None:
        missing.append("analysis/rtp.json: the measured round trip path is not there; the RTP diagrams use the "
                       "catalog's rtp flags")
    xc, why = crosscheck_section.load(path)
    if why:
        missing.append(why)
    d = RunData(path, manifest, sj, None, rtp, missing, models=models, crosscheck=xc,
                verifications=verify_section.load(path))
    if per_rpc:
        d.per_rpc, d.per_rpc_source = per_rpc_rtts(path)
    return d


def _models(rd):
    """{transport: (file name, model)} of analysis/model-TRANSPORT.json (MODEL_FORMAT files only)."""
    out = {}
    for f in rd.model_jsons():
        m = _read_json(f)
        if isinstance(m, dict) and m.get("format") == MODEL_FORMAT and m.get("transport"):
            out.setdefault(m["transport"], (f.name, m))
    return out


def per_rpc_rtts(path):
    """Per-RPC traced RTT (the call's span, the RTT row: its first to its last user mark, us) per case,
    from the per-RPC table `rpcscope analyze` writes; ReportError when it is not there."""
    try:
        table = read_rpc_table(path)
    except RpcTableError as e:
        raise ReportError(str(e)) from None
    return ({cid: t.measured_us(CALL_ROW) for cid, t in table.items()},
            f"{RPCS_SOURCE} ({CALL_ROW} row, per RPC)")
