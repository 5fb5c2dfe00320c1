"""`rpcscope deploy`: run ansible/deploy.yml (packages, the reference RPC, tracing) with a readable summary.

Also home of run_playbook(), which other commands use to run the project's
playbooks (smoke, teardown, capture) the same way.
"""
import argparse
import contextlib
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import ROOT
from .output import UserError, emit_json, table
from .testbed import INVENTORY

ANSIBLE_DIR = ROOT / "ansible"
RUNS_DIR = ROOT / "runs" / "deploy"

EPILOG = """examples:
  rpcscope testbed up && rpcscope deploy          deploy to the local testbed (its inventory)
  rpcscope deploy --inventory ansible/inventories/mylab/hosts.yml
  rpcscope deploy --limit rpcs-server --verbose   one host, Ansible's own output
  rpcscope deploy --json                          summary as JSON (recap, changes, tracing report)

A second run on the same hosts reports changed=0. The full Ansible log of each
run is kept under runs/deploy/. The smoke test: cd ansible && ansible-playbook smoke.yml
"""

RECAP_RE = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                      r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)"
                      r"\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)")
TASK_RE = re.compile(r"^(TASK|RUNNING HANDLER) \[(?P<name>.*)\] \*+$")
RESULT_RE = re.compile(r"^(?P<status>ok|changed|skipping|fatal|failed|unreachable): \[(?P<host>[^\]]+)\]")


def default_inventory():
    return INVENTORY


def ansible_bin(name):
    """The ansible program of the interpreter running rpcscope (the project venv)."""
    path = pathlib.Path(sys.executable).parent / name
    if not path.exists():
        raise UserError(f"{name} is not installed next to {sys.executable}; run `make bootstrap` "
                        f"(it installs ansible-core into the project venv)")
    return str(path)


def run_playbook(playbook, inventory, extra_vars=None, limit=None, check=False, verbose=False,
                 timeout=1800, log_dir=RUNS_DIR, echo=print):
    """Run one of the project's playbooks; return a summary dict (rc, recap, changed and failed tasks, log)."""
    inventory = pathlib.Path(inventory)
    if not inventory.exists():
        raise UserError(f"inventory {inventory} does not exist; start the local testbed with "
                        f"`rpcscope testbed up` or pass --inventory PATH (see ansible/inventories/example/)")
    pb = ANSIBLE_DIR / playbook
    if not pb.exists():
        raise UserError(f"playbook {pb} does not exist")
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_path = log_dir / f"{pb.stem}-{stamp}.log"
    argv = [ansible_bin("ansible-playbook"), "-i", str(inventory.resolve()), str(pb)]
    for k, v in (extra_vars or {}).items():
        argv += ["-e", json.dumps({k: v})]
    if limit:
        argv += ["--limit", limit]
    if check:
        argv += ["--check"]
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "yaml",
        "PATH": f"{pathlib.Path(sys.executable).parent}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
        "PYTHONUNBUFFERED": "1",
    })
    summary = {"playbook": str(pb.relative_to(ROOT)), "inventory": str(inventory), "log": str(log_path),
               "recap": {}, "changed_tasks": [], "failed_tasks": [], "rc": None}
    task, statuses, fail_lines = None, {}, []

    def close_task():
        if task is None:
            return
        changed = sorted(h for h, s in statuses.items() if s == "changed")
        failed = sorted(h for h, s in statuses.items() if s in ("fatal", "failed", "unreachable"))
        if changed:
            summary["changed_tasks"].append({"task": task, "hosts": changed})
            if not verbose:
                echo(f"  changed  {task}  [{', '.join(changed)}]")
        if failed:
            summary["failed_tasks"].append({"task": task, "hosts": failed, "detail": fail_lines[:40]})
            if not verbose:
                echo(f"  FAILED   {task}  [{', '.join(failed)}]")
                for line in fail_lines[:20]:
                    echo(f"           {line}")

    started = time.monotonic()
    # The controller's own temporary files, in a directory of this run that is removed however the
    # playbook ends: Ansible removes its ~/.ansible/tmp/ansible-local-* only when it exits normally, and
    # a stopped deploy (Ctrl-C, SIGTERM, the timeout) left one behind each time.
    ended = []
    with contextlib.ExitStack() as stack:
        local_tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rpcscope-ansible-local-",
                                                                    ignore_cleanup_errors=True))
        log = stack.enter_context(open(log_path, "w"))
        # Unless the playbook ended by itself: a stop (Ctrl-C, SIGTERM, the timeout) can land before the
        # playbook is known here (inside Popen), and its forked workers outlive a kill of the playbook,
        # writing on into local_tmp while it is removed (about one stop in eight). So every
        # process still running with this directory goes before the directory does (callbacks run first).
        stack.callback(lambda: ended or _kill_processes_with_env("ANSIBLE_LOCAL_TEMP", local_tmp))
        env["ANSIBLE_LOCAL_TEMP"] = local_tmp
        log.write("$ " + " ".join(argv) + "\n")
        proc = subprocess.Popen(argv, cwd=ANSIBLE_DIR, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        # A silent hang must not outlast the timeout either.
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        in_fail = False
        try:
            for line in proc.stdout:
                log.write(line)
                line = line.rstrip("\n")
                if verbose:
                    echo(line)
                if time.monotonic() - started > timeout:
                    proc.kill()
                    raise UserError(f"{pb.name} took longer than {timeout}s and was stopped; see {log_path}")
                m = TASK_RE.match(line)
                if m or line.startswith("PLAY RECAP") or line.startswith("PLAY ["):
                    close_task()
                    task = m.group("name") if m else None
                    statuses, fail_lines, in_fail = {}, [], False
                    continue
                m = RESULT_RE.match(line)
                if m:
                    st = m.group("status")
                    host = m.group("host").split(" -> ")[0]
                    prev = statuses.get(host)
                    # A looped task: the worst status of its items counts.
                    rank = {"skipping": 0, "ok": 1, "changed": 2, "failed": 3, "fatal": 3, "unreachable": 3}
                    if prev is None or rank[st] > rank[prev]:
                        statuses[host] = st
                    in_fail = st in ("fatal", "failed", "unreachable")
                    if in_fail:
                        fail_lines.append(line[:300])
                    continue
                if in_fail and line.strip() and len(fail_lines) < 40:
                    fail_lines.append(line[:300])
                m = RECAP_RE.match(line)
                if m:
                    summary["recap"][m.group("host")] = {k: int(v) for k, v in m.groupdict().items() if k != "host"}
            proc.wait(timeout=max(1, timeout - (time.monotonic() - started)))
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode >= 0:
            ended.append(True)
        close_task()
    summary["rc"] = proc.returncode
    if time.monotonic() - started >= timeout:
        raise UserError(f"{pb.name} took longer than {timeout}s and was stopped; see {log_path}")
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


def _kill_processes_with_env(name, value, seconds=10.0):
    """SIGKILL every process (but this one) whose environment has name=value, then wait until none is
    left, at most `seconds`: the processes a stopped playbook leaves, found by the temporary directory
    only they were given."""
    needle = b"\0" + f"{name}={value}".encode() + b"\0"

    def holders():
        out = []
        for d in pathlib.Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) == os.getpid():
                continue
            try:
                if needle in b"\0" + (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:           # gone, or not ours to read
                continue
        return out
    end = time.monotonic() + seconds
    while (pids := holders()) and time.monotonic() < end:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def tracing_reports(hosts):
    out = {}
    for h in hosts:
        p = RUNS_DIR / f"{h}.json"
        try:
            out[h] = json.loads(p.read_text())
        except (OSError, ValueError):
            pass
    return out


def cmd_deploy(args):
    inventory = pathlib.Path(args.inventory) if args.inventory else default_inventory()
    extra = {}
    for kv in args.extra_vars or []:
        if "=" not in kv:
            raise UserError(f"-e {kv!r}: use KEY=VALUE, e.g. -e rpc_install_method=artifacts")
        k, v = kv.split("=", 1)
        extra[k] = v
    echo = (lambda s: None) if args.json else print
    if not args.json:
        print(f"deploy: ansible/deploy.yml on {inventory} (log under {RUNS_DIR.relative_to(ROOT)}/)")
    s = run_playbook("deploy.yml", inventory, extra_vars=extra, limit=args.limit, check=args.check,
                     verbose=args.verbose and not args.json, timeout=args.timeout, echo=echo)
    s["tracing"] = tracing_reports(s["recap"].keys())
    total_changed = sum(r["changed"] for r in s["recap"].values())
    ok = s["rc"] == 0 and all(r["failed"] == 0 and r["unreachable"] == 0 for r in s["recap"].values())
    s["ok"] = ok
    s["changed"] = total_changed
    if args.json:
        emit_json(s)
        return 0 if ok else 1
    if not s["recap"]:
        raise UserError(f"ansible-playbook exited {s['rc']} before running any play; see {s['log']}")
    print()
    table([{"host": h, **r} for h, r in s["recap"].items()],
          ["host", "ok", "changed", "unreachable", "failed", "skipped"])
    if s["tracing"]:
        print()
        rows = [{"host": h, "tracefs": r.get("tracefs"), "debugfs": r.get("debugfs"),
                 "lttng-sessiond": r.get("lttng_sessiond"), "perf": r.get("perf", "")[:24],
                 "tracepoints": r.get("perf_tracepoints"), "kernel tracer": r.get("kernel_tracer")}
                for h, r in s["tracing"].items()]
        table(rows, ["host", "tracefs", "debugfs", "lttng-sessiond", "perf", "tracepoints", "kernel tracer"])
    print()
    if ok:
        print(f"deploy: done in {s['seconds']:.0f}s, {total_changed} change(s)"
              + ("; already in place" if total_changed == 0 else "; a second run reports changed=0"))
        return 0
    raise UserError(f"deploy failed on {', '.join(h for h, r in s['recap'].items() if r['failed'] or r['unreachable'])}"
                    f" (ansible-playbook exit {s['rc']}); the failing tasks are listed above, the full log "
                    f"is {s['log']}")


def register(subparsers):
    ap = subparsers.add_parser(
        "deploy", help="install packages, the reference RPC and tracing on the testbed hosts (ansible/deploy.yml)",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inventory", "-i", metavar="PATH",
                    help="Ansible inventory (default: the local testbed's, ansible/inventories/local/hosts.yml)")
    ap.add_argument("--limit", metavar="PATTERN", help="only these hosts (Ansible's --limit)")
    ap.add_argument("--check", action="store_true", help="dry run (Ansible's --check)")
    ap.add_argument("-e", "--extra-vars", action="append", metavar="KEY=VALUE",
                    help="set a role variable, e.g. -e rpc_install_method=artifacts (repeatable)")
    ap.add_argument("--timeout", type=int, default=1800, help="stop the run after this many seconds (default 1800)")
    ap.add_argument("--verbose", "-v", action="store_true", help="show Ansible's own output as it runs")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.set_defaults(func=cmd_deploy)
    return ap
