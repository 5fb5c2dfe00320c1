"""The reference RPC under a real lttng-sessiond: every user-space step of the
catalog is emitted, in an order the catalog's edges allow, on both sides.

Runs a null call series and a 24096-byte (three-window) call series over UDP
and TCP with the traced build, reads the trace with babeltrace2's Python
bindings, and checks it against rpcscope.tracepoints (generated from
tracepoints/steps.toml), so the test and the code cannot drift apart.
"""
import collections
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
import uuid

import pytest

from rpcscope import ROOT
from rpcscope.tracepoints import EVENTS, PROVIDER, STEPS, applicable

pytestmark = pytest.mark.tracing

BIN = ROOT / "build" / "trace" / "bin"
STEP = {s["id"]: s for s in STEPS}
EVENT_STEP = {e["name"]: e["step"] for e in EVENTS}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, socket.socket() as t:
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u.bind(("127.0.0.1", port))
        return port


@pytest.fixture(scope="module")
def sessiond():
    """A root lttng-sessiond: the one running, or one this module starts and stops."""
    if shutil.which("lttng") is None:
        pytest.fail("lttng is not installed: run `make bootstrap`")
    if subprocess.run(["pgrep", "-x", "lttng-sessiond"], capture_output=True).returncode == 0:
        yield None
        return
    subprocess.run(["lttng-sessiond", "--daemonize"], check=True)
    # The daemon writes its pid here; `pgrep -n` could pick its run-as helper instead.
    pid = int(pathlib.Path("/var/run/lttng/lttng-sessiond.pid").read_text().split()[0])
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode:
                break
            time.sleep(0.05)


def _lttng(*args):
    r = subprocess.run(["lttng", *args], capture_output=True, text=True)
    assert r.returncode == 0, f"lttng {' '.join(args)} failed: {r.stderr}"
    return r.stdout


def _capture(tmp_path, transport, executors, runs, extra=()):
    """Trace one server and the given client runs; return the trace directory and
    the PIDs started (other rpcscope programs on the machine may register with
    the same session daemon: their events are not this test's)."""
    pids = set()
    name = f"rpcscope-test-{uuid.uuid4().hex[:8]}"
    out = tmp_path / name
    _lttng("create", name, f"--output={out}")
    try:
        _lttng("enable-event", "-u", f"{PROVIDER}:*", "-s", name)
        _lttng("add-context", "-u", "-t", "vpid", "-t", "vtid", "-t", "procname", "-s", name)
        _lttng("start", name)
        port = _free_port()
        ready = tmp_path / f"ready-{port}"
        server = subprocess.Popen([BIN / "rpc-server", "--port", str(port), "--transport", transport,
                                   "--executors", str(executors), "--duration", "60",
                                   "--ready-file", ready, *extra], stderr=subprocess.PIPE)
        pids.add(server.pid)
        try:
            for _ in range(200):
                if ready.exists():
                    break
                time.sleep(0.02)
            assert ready.exists(), "rpc-server did not start"
            for proc, size, calls in runs:
                client = subprocess.Popen([BIN / "rpc-client", "--port", str(port), "--transport", transport,
                                           "--proc", proc, "--size", str(size), "--calls", str(calls),
                                           "--warmup", "0", "--json", *extra],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                pids.add(client.pid)
                _, err = client.communicate(timeout=60)
                assert client.returncode == 0, err
        finally:
            server.terminate()
            server.wait(timeout=10)
        _lttng("stop", name)
    finally:
        subprocess.run(["lttng", "destroy", name], capture_output=True)
    return out, pids


def _read(trace_dir, pids):
    import bt2

    events = []
    for msg in bt2.TraceCollectionMessageIterator(str(trace_dir)):
        if type(msg) is bt2._EventMessageConst:
            ev = msg.event
            if int(ev.common_context_field["vpid"]) not in pids:
                continue
            events.append({
                "name": ev.name,
                "ts": msg.default_clock_snapshot.ns_from_origin,
                "tid": int(ev.common_context_field["vtid"]),
                "procname": str(ev.common_context_field["procname"]),
                "call_id": int(ev.payload_field["call_id"]),
                "bytes": int(ev.payload_field["bytes"]) if "bytes" in ev.payload_field else None,
            })
    # The catalog's rule: an event with call id 0 (a listener before recvfrom
    # returns) belongs to the next event on its thread that carries a call id.
    pending = collections.defaultdict(list)
    for e in events:
        if e["call_id"] == 0:
            pending[e["tid"]].append(e)
        else:
            for p in pending.pop(e["tid"], []):
                p["call_id"] = e["call_id"]
    return events


def _user_next(step_id, conditions, seen=None):
    """Steps with user events that can follow step_id, skipping kernel-only steps
    and steps that do not apply under the run's conditions."""
    out = set()
    seen = seen or set()
    for n in STEP[step_id]["next"]:
        if n in seen:
            continue
        seen.add(n)
        if STEP[n]["user_events"] and applicable(n, conditions):
            out.add(n)
        else:
            out |= _user_next(n, conditions, seen)
    return out


def _check_order(events, conditions):
    """Per thread, consecutive steps must follow the catalog's edges."""
    by_tid = collections.defaultdict(list)
    for e in events:
        by_tid[e["tid"]].append(e)
    for tid, evs in by_tid.items():
        steps = []
        for e in evs:
            s = EVENT_STEP[e["name"]]
            if not steps or steps[-1] != s:
                steps.append(s)
        for a, b in zip(steps, steps[1:]):
            assert b in _user_next(a, conditions), f"thread {tid}: step {b} after {a} is not an edge of the catalog " \
                                       f"(sequence {steps[:40]})"


def _required(side, conditions):
    return {s["id"] for s in STEPS if s["side"] == side and s["user_events"] and applicable(s["id"], conditions)}


@pytest.mark.parametrize("transport,executors,extra", [
    ("udp", 2, ()), ("udp", 0, ()), ("tcp", 2, ()), ("udp", 0, ("--no-nb-select",)),
    ("udp", 0, ("--wait", "recv")), ("udp", 2, ("--wait", "recv"))])
def test_every_user_step_in_order(tmp_path, sessiond, transport, executors, extra):
    trace, pids = _capture(tmp_path, transport, executors, [("null", 0, 20), ("maxarg", 24096, 5)], extra)
    events = _read(trace, pids)
    assert events, "the trace holds no rpcscope events"
    names = {e["name"] for e in events}
    assert all(n.startswith(PROVIDER + ":") for n in names)
    # Calls by id: which side emitted what, and what size each call was.
    client = [e for e in events if e["procname"].startswith("rpc-client")]
    server = [e for e in events if e["procname"].startswith("rpc-server")]
    assert client and server
    sizes = {e["call_id"]: e for e in client if e["name"] == f"{PROVIDER}:c1_begin"}
    assert len(sizes) == 21 + 6, f"expected 27 calls, saw {len(sizes)}"

    base = {"virtual_link"} | ({"tcp"} if transport == "tcp" else set()) | ({"inline"} if not executors else set())
    if "--no-nb-select" in extra:
        base.add("no_nb_select")
    if "recv" in extra:
        base.add("recv_wait")
    # Marks the catalog says are absent under these conditions must be absent; no others.
    absent = {m for st in STEPS for c, ms in st["absent_marks"].items() if c in base for m in ms}
    not_applicable = {e for st in STEPS if not applicable(st["id"], base) for e in st["user_events"]}
    assert not names & (absent | not_applicable), sorted(names & (absent | not_applicable))
    _check_order(events, base)
    steps_by_call = collections.defaultdict(lambda: collections.defaultdict(set))
    for side, evs in (("client", client), ("server", server)):
        for e in evs:
            steps_by_call[e["call_id"]][side].add(EVENT_STEP[e["name"]])
    for series_multi in (False, True):
        conditions = base | (set() if series_multi else {"single_window"})
        calls = [cid for cid, e in sizes.items() if (e["bytes"] == 24096) == series_multi]
        assert len(calls) == (6 if series_multi else 21)  # each run: a first call, then the calls
        for side in ("client", "server"):
            union = set().union(*(steps_by_call[c][side] for c in calls)) if calls else set()
            missing = _required(side, conditions) - union
            assert not missing, f"{transport} {'multi' if series_multi else 'single'}-window calls: " \
                                f"{side} steps {sorted(missing)} never emitted"
        for cid in calls:
            # Steps that run once per call appear in every call, on the right side.
            for sid in ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C9", "C19", "C20", "C21"):
                assert sid in steps_by_call[cid]["client"], f"call {cid:#x}: no {sid}"
            for sid in ("S4", "S6", "S7", "S8", "S10", "S11"):
                assert sid in steps_by_call[cid]["server"], f"call {cid:#x}: no {sid}"
    # Multi-window UDP calls acknowledge two windows each (1 + 2 + 3 PDUs for 24096 bytes).
    if transport == "udp":
        c22 = collections.Counter(e["call_id"] for e in client if e["name"] == f"{PROVIDER}:c22_begin")
        s15 = collections.Counter(e["call_id"] for e in server if e["name"] == f"{PROVIDER}:s15_begin")
        multi = [cid for cid in c22]
        assert len(multi) == 6 and all(c22[c] == 2 and s15[c] == 2 for c in multi), (c22, s15)
    else:
        assert not any(e["name"].endswith(("c22_begin", "s15_begin", "s16_begin")) for e in events)
