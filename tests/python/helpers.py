"""What the tests that run `rpcscope` as a user would, and the tests that drive the testbed, share.

    RPCSCOPE                      argv that runs this checkout's rpcscope in this interpreter
    rpcscope(*args, ...)          run it, bounded in time; by default assert that it exits 0
    rpcscope_json(*args, ...)     run it with --json and parse what it prints
    sh(*argv, ...)                run a system command, bounded in time
    module_testbed(...)       the testbed brought up for one test module and taken down at its end
    processes_in_hosts(...)       what runs in the testbed's namespaces besides their sshd
    CAPTURE_MARKS                 the marks of a module that captures on the testbed
    capture_leftovers(run_dir)    what a capture could leave running: processes, perf, LTTng, tracefs
    kernel_events(kdir)           (event, perf_pid, device) of every event of a perf CTF trace

Conftest.py's fixtures run the reference RPC itself; these run the command line around it.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from rpcscope.collectors import lttng as clttng, perf as cperf
from rpcscope.testbed import health, held_by_tests, load_state, remains
from rpcscope.testbed.config import DEFAULT_CLIENT, DEFAULT_SERVER, STATE_DIR

REPO = pathlib.Path(__file__).resolve().parents[2]
RPCSCOPE = [sys.executable, "-c", "import sys; from rpcscope.cli import main; sys.exit(main())"]
HOSTS = (DEFAULT_CLIENT, DEFAULT_SERVER)

# The marks of a module that captures on the testbed (pytestmark = CAPTURE_MARKS).
CAPTURE_MARKS = [
    pytest.mark.testbed,
    pytest.mark.tracing,
    pytest.mark.skipif(os.geteuid() != 0, reason="capture needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "perf", "lttng", "babeltrace2")),
                       reason="needs iproute2, openssh-server, perf, lttng-tools, babeltrace2 (make bootstrap)"),
]


def rpcscope(*args, timeout=300, check=True, env=None, user=None):
    """Run `rpcscope ARGS` from the checkout (env: variables added to this environment; user: as that
    uid and gid, no groups); with check, assert that it exits 0 and show its output where it does not."""
    argv = RPCSCOPE + [str(a) for a in args]
    if user:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                       env={**os.environ, **(env or {})})
    if check:
        assert p.returncode == 0, \
            f"rpcscope {' '.join(map(str, args))} exited {p.returncode}\n{p.stdout[-6000:]}\n{p.stderr}"
    return p


def rpcscope_json(*args, timeout=120):
    return json.loads(rpcscope(*args, "--json", timeout=timeout).stdout)


def sh(*argv, timeout=60, check=False):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


def is_testbed_up():
    """Whether a testbed is up on this machine (its state directory exists), under the tests' hold on it.
    A record none of whose parts exist (the machine restarted under it, or the directory was copied to
    this one) is nobody's testbed: `rpcscope testbed down` clears it first, and it counts as down."""
    st = load_state()
    if st is not None and not remains(st):
        rpcscope("testbed", "down", check=False, timeout=180)
    return STATE_DIR.exists()


@contextlib.contextmanager
def module_testbed(while_down=None):
    """The testbed up for one test module and down at its end, whatever happens, under the tests' hold
    on it (one such module at a time on this machine). A testbed already up would be replaced: the
    module is skipped instead. while_down(): what to check before `up`, with the testbed down."""
    with held_by_tests(wait=1200):
        if is_testbed_up():
            pytest.skip("a testbed is already up on this machine; this test would replace it "
                        "(run `rpcscope testbed down` first)")
        try:
            if while_down:
                while_down()
            rpcscope("testbed", "up", "--json", timeout=180)
            yield
        finally:
            rpcscope("testbed", "down", check=False, timeout=180)


def shared_testbed(while_down=None):
    """The testbed for a module that changes nothing on it, under the tests' hold on it: a healthy one
    already up is used as it is and left up (the hold keeps anyone else's `testbed down` off it
    meanwhile); else the module brings one up and down. while_down(): what to check before `up`,
    with the testbed down."""
    with held_by_tests(wait=1200):
        st = load_state()
        if st and not health(st):
            yield
            return
        try:
            if while_down:
                while_down()
            rpcscope("testbed", "up", "--json", timeout=180)
            yield
        finally:
            rpcscope("testbed", "down", check=False, timeout=180)


def processes_in_hosts(hosts=HOSTS):
    """["HOST: PID COMMAND LINE"] of the live processes in the hosts' namespaces other than their sshd
    (servers, clients, recorders a run left)."""
    found = []
    for h in hosts:
        for pid in sh("ip", "netns", "pids", h, timeout=30).stdout.split():
            try:
                cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and "sshd" not in cmd:
                found.append(f"{h}: {pid} {cmd}")
    return found


def ftrace_instances():
    """rpcscope's tracefs instances on this machine."""
    return sorted(p.name for p in (cperf.TRACEFS / "instances").glob("rpcscope-*"))


def capture_leftovers(run_dir):
    """What a capture could leave running: processes in the hosts' namespaces other than their sshd,
    perf recording into the run, LTTng sessions of a capture, tracefs instances."""
    found = processes_in_hosts()
    for pid in sh("pgrep", "-f", f"perf record.*{run_dir}").stdout.split():
        found.append(f"perf {pid}")
    found += [f"lttng session {n}" for n in clttng.session_names() if n and n.startswith("rpcs-capture-")]
    found += [f"tracefs instance {n}" for n in ftrace_instances()]
    return found


def kernel_events(kdir):
    """(event name, perf_pid, device name or None) of every event of a perf CTF trace."""
    p = sh("babeltrace2", str(kdir), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = []
    for line in p.stdout.splitlines():
        m = re.search(r"\) (\S+): .*perf_pid = (-?\d+)", line)
        if not m:
            continue
        dev = re.search(r'\bname = "([^"]*)"', line)
        out.append((m.group(1), int(m.group(2)), dev.group(1) if dev else None))
    return out
