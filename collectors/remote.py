"""`rpcscope capture --inventory PATH`: the capture on real hosts, through ansible/capture.yml.

Each (transport, size) case is one run of the playbook; each host has its own
lttng-sessiond and kernel collector. The playbook leaves in the case directory
client-{traced,untraced}-HOST.json, ust-HOST/, kernel-HOST/ and host-HOST.json
(losses, CPU, kernel, tool versions); this module writes the manifest from them, with a timestamp
exchange over SSH with every host before and after each case (clockcheck.py; cases[].clock_check).
Calibration is not run on real hosts by this driver (manifest: calibration {}).
"""
import datetime
import json
import pathlib

import yaml

from rpcscope.deploy import run_playbook
from rpcscope.output import UserError
from rpcscope.rundir import MANIFEST_FORMAT, RunDir

from . import clockcheck
from .manifest import git_commit
from .options import BASE_PORT, case_id
from .processes import aslr_record, bt_count, dir_bytes, placement_cpus
from .rounds import rtt_record


def run(p, out, inventory, progress=None, echo=lambda s: None):
    inventory = pathlib.Path(inventory)
    if not inventory.exists():
        raise UserError(f"inventory {inventory} does not exist; see ansible/inventories/example/hosts.yml")
    per_host = inventory_collectors(inventory)
    if p["kernel"] == "auto" and per_host is None:
        raise UserError("--kernel auto is decided per host on real hosts: pass --kernel perf, lttng or none, or give "
                        "every host rpcscope_kernel_collector in the inventory (the deploy report "
                        "runs/deploy/HOST.json says which tracer each host has)")
    if p["kernel"] == "ftrace":
        raise UserError("--kernel ftrace records on the local testbed only (ansible/capture.yml runs perf or "
                        "LTTng on real hosts): pass --kernel perf, lttng or none")
    out.mkdir(parents=True)
    manifest = {
        "format": MANIFEST_FORMAT, "complete": False, "interrupted": False,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "finished": None, "git_commit": git_commit(), "params": p,
        "testbed": {"kind": "inventory", "inventory": str(inventory), "shared_kernel": False,
                    "shared_sessiond": False, "link": {"rate": None, "mtu": None, "loss": None}},
        "hosts": {}, "placement": p["placement"], "wait": p["wait"], "server_executors": p["executors"],
        # capture.yml does not hold a PM QoS request on the hosts: their idle policy is the OS's.
        "idle": {"policy": "os", "requested": p.get("idle", "poll"),
                 "mechanism": "not applied on real hosts by this driver: set C-states on the hosts themselves"},
        "aslr": aslr_record(p.get("aslr", "off"), local=False),
        "kernel_collector": p["kernel"], "clock": "monotonic", "kernel_clock_aligned_to_ust": False,
        "kernel_collectors": per_host if p["kernel"] == "auto" else {},
        "tools": {}, "calibration": {}, "cases": [],
    }
    cpus = placement_cpus(p["placement"])
    ssh = clockcheck.ssh_commands(inventory)      # the independent clock check around each case

    def write():
        RunDir(out).write_manifest(manifest)

    write()
    try:
        port = BASE_PORT
        for transport in p["transports"]:
            for size in p["sizes"]:
                port += 1
                cid = case_id(transport, p["proc"], size)
                cdir = RunDir(out).case_dir(cid)
                cdir.mkdir(parents=True)
                if progress is not None:
                    progress.set_description(f"{cid}: ansible capture.yml")
                xv = {"capture_run_dir": str(out.resolve()), "capture_transport": transport,
                      "capture_proc": p["proc"], "capture_size": size, "capture_calls": p["calls"],
                      "capture_warmup": p["warmup"], "capture_kernel": p["kernel"], "capture_port": port,
                      "capture_wait": p["wait"], "capture_server_executors": p["executors"],
                      "capture_aslr": p.get("aslr", "off"),
                      "capture_kernel_events": p.get("kernel_events", "lean")}
                before = clockcheck.check(ssh)
                try:
                    summary = run_playbook("capture.yml", inventory, extra_vars=xv, timeout=3600, echo=echo)
                except BaseException:
                    _cleanup(inventory, xv, echo)
                    raise
                after = clockcheck.check(ssh)
                if summary.get("rc") != 0:
                    _cleanup(inventory, xv, echo)
                    raise UserError(f"capture.yml failed for {cid}; see {summary.get('log')} "
                                    f"(capture_cleanup.yml stopped what it had started)")
                manifest["cases"].append(dict(_case(p, cid, transport, size, cdir, manifest, cpus),
                                              clock_check={"before": before, "after": after}))
                write()
                if progress is not None:
                    progress.update(3)
        manifest["complete"] = True
    except KeyboardInterrupt:
        manifest["interrupted"] = True
        raise
    finally:
        manifest["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        write()
    return manifest


def inventory_collectors(inventory):
    """{host: kernel collector} when every host of the inventory names its own (rpcscope_kernel_collector,
    as the local testbed's inventory does), else None."""
    try:
        inv = yaml.safe_load(pathlib.Path(inventory).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    found, complete = {}, True

    def walk(group, inherited):
        nonlocal complete
        if not isinstance(group, dict):
            return
        gvars = {**inherited, **(group.get("vars") or {})}
        for name, hv in (group.get("hosts") or {}).items():
            kc = {**gvars, **(hv or {})}.get("rpcscope_kernel_collector")
            if kc in ("perf", "lttng", "none"):
                found[name] = kc
            else:
                complete = False
        for child in (group.get("children") or {}).values():
            walk(child, gvars)

    walk(inv.get("all", inv), {})
    return found if found and complete else None


def _cleanup(inventory, extra_vars, echo):
    try:
        run_playbook("capture_cleanup.yml", inventory, extra_vars=extra_vars, timeout=600, echo=echo)
    except (UserError, OSError):
        pass


def _case(p, cid, transport, size, cdir, manifest, cpus):
    case = {"id": cid, "transport": transport, "proc": p["proc"], "size": size, "calls": p["calls"],
            "warmup": p["warmup"], "dir": RunDir.case_rel(cid), "complete": True, "pids": {},
            "traced": {}, "untraced": {}, "events": {"ust": 0, "kernel": 0},
            "losses": {"ust_discarded": 0, "ust_lost_packets": 0, "kernel_lost": 0},
            "trace_bytes": {"ust": 0, "kernel": 0}, "per_host": {}}
    for hj in sorted(cdir.glob("host-*.json")):
        h = json.loads(hj.read_text())
        name, facts = h["host"], h.get("facts", {})
        manifest["hosts"][name] = {"role": h["role"], "address": h.get("address"), "kernel": facts.get("kernel"),
                                   "cpu_model": facts.get("cpu_model"), "cpus": [int(c) for c in h.get("cpus", [])],
                                   "clocksource": facts.get("clocksource")}
        manifest["tools"] = {k: facts.get(k) for k in ("lttng", "perf", "babeltrace2")}
        n_ust = bt_count(cdir / f"ust-{name}")[0] if (cdir / f"ust-{name}").exists() else 0
        n_k = bt_count(cdir / f"kernel-{name}")[0] if (cdir / f"kernel-{name}").exists() else 0
        lost = {"ust_discarded": int(h.get("ust_discarded", 0)), "ust_lost_packets": int(h.get("ust_lost_packets", 0)),
                "kernel_lost": int(h.get("kernel_lost", 0))}
        case["per_host"][name] = {"events": {"ust": n_ust, "kernel": n_k}, "losses": lost}
        case["events"]["ust"] += n_ust
        case["events"]["kernel"] += n_k
        for k, v in lost.items():
            case["losses"][k] += v
        case["trace_bytes"]["ust"] += dir_bytes(cdir / f"ust-{name}")
        case["trace_bytes"]["kernel"] += dir_bytes(cdir / f"kernel-{name}")
    for kind in ("traced", "untraced"):
        files = sorted(cdir.glob(f"client-{kind}-*.json"))
        if files:
            case[kind] = rtt_record(json.loads(files[0].read_text()))
            if len(files) > 1:
                case[f"{kind}_per_client"] = {f.stem.split(f"client-{kind}-", 1)[1]:
                                              rtt_record(json.loads(f.read_text()))
                                              for f in files}
    total = p["calls"] + p["warmup"]
    case["events_per_call"] = {k: round(v / total, 2) for k, v in case["events"].items()}
    case["lossy"] = any(case["losses"].values())
    case["trace_bytes_per_1000_calls"] = round(sum(case["trace_bytes"].values()) * 1000 / total)
    return case
