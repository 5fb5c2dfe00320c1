"""The capture's manifest (rpcscope/rundir.py names its file and checks its shape): the record of the
machine and the testbed a capture starts with, each case's record, and the per-round records kept
beside a case (cases/ID/rounds.json).
"""
import datetime
import platform
import re
import shutil
import subprocess

from rpcscope import ROOT
from rpcscope.rundir import MANIFEST_FORMAT, ROUNDS_FORMAT, RunDir
from rpcscope.units import fmt_rate

from . import idle, lttng, perf
from .options import NOTRACE_BIN, TRACE_BIN, case_id
from .processes import aslr_record, read_text
from .rounds import run_pace_ns

# ---------------------------------------------------------------- facts about the machine

def cpu_model():
    for line in (read_text("/proc/cpuinfo", "") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def clocksource():
    return read_text("/sys/devices/system/clocksource/clocksource0/current_clocksource", "unknown")


def git_commit():
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "rpc", "tracepoints"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+dirty" if dirty else "") if head else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def tool_versions(kernel):
    out = {"lttng": lttng.version()}
    if kernel == "perf" or shutil.which("perf"):
        out["perf"] = perf.version()
    p = subprocess.run(["babeltrace2", "--version"], capture_output=True, text=True, timeout=10)
    m = re.search(r"(\d+\.\d+\.\d+)", p.stdout)
    out["babeltrace2"] = m.group(1) if m else p.stdout.strip()
    return out


# ---------------------------------------------------------------- the records

def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def base_manifest(p, tb, hosts, cpus, kernel, devices, server_wait):
    """The manifest a capture starts with (complete: False, no case yet). p: the parameters; tb: the
    testbed's state; hosts: {role: the testbed's host}; cpus: {role: CPU}; kernel: the kernel collector;
    devices: the devices it records; server_wait(transport): how the server waits."""
    kernel_release = platform.release()
    link = tb["link"]
    host_records = {}
    for role in ("client", "server"):
        h = hosts[role]
        host_records[h["name"]] = {"role": role, "address": h["address"], "kernel": kernel_release,
                                   "cpu_model": cpu_model(), "cpus": [cpus[role]], "clocksource": clocksource(),
                                   "ifname": h["ifname"]}
    return {
        "format": MANIFEST_FORMAT, "complete": False, "interrupted": False,
        "created": now(), "finished": None, "git_commit": git_commit(), "params": p,
        "testbed": {"kind": "local", "shared_kernel": True, "shared_sessiond": True,
                    "link": {"rate": fmt_rate(link.get("rate_bit")), "rate_bit": link.get("rate_bit"),
                             "mtu": link.get("mtu"), "loss": link.get("loss_percent")},
                    "devices": devices},
        "hosts": host_records,
        "placement": p["placement"], "wait": p["wait"],
        "idle": idle.IdlePolicy(p.get("idle", "poll")).record(),
        "aslr": aslr_record(p.get("aslr", "off")),
        "server_wait": {t: server_wait(t) for t in p["transports"]},
        "server_executors": p["executors"],
        "kernel_collector": kernel,
        "kernel_collectors": {"shared": kernel} if kernel != "none" else {},
        "clock": "monotonic",
        "kernel_clock_aligned_to_ust": kernel in ("perf", "ftrace"),
        "tools": tool_versions(kernel),
        "binaries": {"traced": str(TRACE_BIN), "untraced": str(NOTRACE_BIN)},
        "calibration": {}, "cases": [],
    }


def case_record(transport, p, size):
    """A new case's record (manifest cases[]), not yet complete."""
    cid = case_id(transport, p["proc"], size)
    return {"id": cid, "transport": transport, "proc": p["proc"], "size": size, "calls": p["calls"],
            "warmup": p["warmup"], "dir": RunDir.case_rel(cid), "complete": False}


def repeats_record(record, runs, order, kept, agreeing):
    """A case's rounds (manifest cases[].repeats): how many, the kept one and those that agree with it,
    the order its runs ran in, and every round's p50, pace and sleeps per kind. record: the transport's
    sweeps record; runs: {kind: [run]}."""
    rep = {"rounds": record["rounds"], "extra_rounds": record["extra_rounds"], "kept_round": kept,
           "agreeing_rounds": agreeing, "order": order,
           **{f"{k}_p50_ns": [r["res"]["rtt_ns"]["p50"] for r in v] for k, v in runs.items()},
           **{f"{k}_pace_ns": [run_pace_ns(r["res"]) for r in v] for k, v in runs.items()},
           **{f"{k}_sleeps_per_call": [r.get("sleeps") for r in v] for k, v in runs.items()}}
    if record.get("turns"):      # the runs took turns (--turns): analysis/run.py level_rounds_p50s
        rep["turns"] = {"turn_calls": record["turns"]["turn_calls"], "round_speed": record["turns"]["round_speed"],
                        **{f"{k}_turns": [r["turns"]["count"] for r in v] for k, v in runs.items()}}
    return rep


def rounds_json(runs, kept):
    """cases/ID/rounds.json: every round's client summary, its histogram included, per kind. The rounds
    a case did not keep still show which modes their calls fell in, which a level's p50s alone cannot
    tell from a switch of the host's speed level (analysis/MODEL.md)."""
    return {"format": ROUNDS_FORMAT, "kept_round": kept,
            "kinds": {k: [{"round": r, "rtt_ns": x["res"].get("rtt_ns"), "rtt_hist": x["res"].get("rtt_hist"),
                           "pace": x["res"].get("pace"),
                           "sleeps_per_call": x.get("sleeps")} for r, x in enumerate(v)] for k, v in runs.items()}}
