"""Two kernels: `rpcscope testbed up --server vm` (a QEMU guest booting `make vm`'s Debian kernel),
`rpcscope deploy` through the roles, a capture through ansible/capture.yml with LTTng's kernel tracer
in the guest and perf on the namespace client, `rpcscope analyze`; then `testbed down`.

Reduced (about 4 minutes under TCG; in make test, and alone with make test-vm): one boot shared by two
captures of 300 calls (+30 warm-up) of maxarg, at 4016 bytes over UDP (two PDUs and a window
acknowledgement) and at 0 bytes over TCP. What a fixture covers stays with it:
the injected clock shifts, the mapping's arithmetic and the report (test_clock_apply.py, on a
capture of this kind). The guest is emulated (TCG here), many times slower than this machine: these
tests check what the traces hold and how they line up, never how fast anything is.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import is_testbed_up

from rpcscope.analysis.clocksync import estimate
from rpcscope.analysis.rpcs import MEASURED, reconstruct
from rpcscope.analysis.run import load_run
from rpcscope.analysis.timeline import CPU_STRIDE
from rpcscope.analysis.traceread import KIND
from rpcscope.testbed import held_by_tests, vmhost
from rpcscope.testbed.config import STATE_DIR

REPO = pathlib.Path(__file__).resolve().parents[2]
RPCSCOPE = [sys.executable, "-c", "import sys; from rpcscope.cli import main; sys.exit(main())"]
INVENTORY = REPO / "ansible" / "inventories" / "local" / "hosts.yml"
CLIENT, SERVER = "rpcs-client", "rpcs-server"
CALLS, WARMUP = 300, 30
CASES = (("udp", "4016"), ("tcp", "0"))          # (transport, size): one capture each

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.tracing,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("ip", "sshd", "perf", "lttng", "babeltrace2",
                                                         vmhost.QEMU)),
                       reason="needs iproute2, openssh-server, perf, lttng-tools, babeltrace2, qemu-system-x86 "
                              "(make bootstrap)"),
    pytest.mark.skipif(not vmhost.VM_JSON.exists(),
                       reason="the VM host's kernel, lttng-modules and initramfs are not built: run `make vm` "
                              "(make test-vm does)"),
]


def rpcscope(*args, timeout=300, check=True):
    p = subprocess.run(RPCSCOPE + list(args), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if check:
        assert p.returncode == 0, \
            f"rpcscope {' '.join(args)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _teardown_playbook():
    """Stop what deploy started on the namespace client (its lttng-sessiond runs on this machine); what
    it started in the guest goes with the guest's QEMU at `testbed down`."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"),
           "PATH": f"{pathlib.Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY),
                    "--limit", CLIENT, "teardown.yml"], cwd=REPO / "ansible", env=env, capture_output=True,
                   timeout=300)


@pytest.fixture(scope="module")
def vm_run(tmp_path_factory):
    """Up with a VM server, deploy, capture each of CASES, analyze, down: ([run dirs], status JSON, what
    down left)."""
    base = tmp_path_factory.mktemp("vm")
    outs = [base / f"{t}-{size}" for t, size in CASES]
    with held_by_tests(wait=1200):
        if is_testbed_up():
            pytest.skip("a testbed is already up on this machine; this test would replace it "
                        "(run `rpcscope testbed down` first)")
        try:
            rpcscope("testbed", "up", "--server", "vm", "--json", timeout=400)
            status = json.loads(rpcscope("testbed", "status", "--json", timeout=120).stdout)
            d = rpcscope("deploy", "--json", timeout=1200)
            assert json.loads(d.stdout)["ok"], d.stdout[-3000:]
            for (t, size), out in zip(CASES, outs):
                rpcscope("capture", "--inventory", str(INVENTORY), "--kernel", "auto", "--sizes", size,
                         "--transport", t, "--calls", str(CALLS), "--warmup", str(WARMUP),
                         "--calibration", "none", "--out", str(out), timeout=1800)
        finally:
            if INVENTORY.exists():
                _teardown_playbook()
            rpcscope("testbed", "down", check=False, timeout=300)
        left = {"qemu": vmhost.stray_qemus(STATE_DIR),
                "tap": subprocess.run(["ip", "link", "show", "dev", "rpcs-s0-br"], capture_output=True).returncode == 0,
                "state": STATE_DIR.exists()}
    for out in outs:
        rpcscope("analyze", str(out), timeout=900)
    yield outs, status, left


def test_status_says_the_server_is_a_guest_and_its_acceleration(vm_run):
    _, status, _ = vm_run
    rows = {r["host"]: r for r in status["hosts"]}
    assert status["healthy"] and status["host_to_host"], status
    assert rows[SERVER]["kind"] == f"vm {vmhost.acceleration()}" and rows[SERVER]["ssh"] == "ok", rows
    assert rows[CLIENT]["kind"] == "netns", rows


def test_down_leaves_no_process_tap_or_file(vm_run):
    assert vm_run[2] == {"qemu": [], "tap": False, "state": False}


def test_two_kernels_each_with_its_own_tracer(vm_run):
    for out, (t, size) in zip(vm_run[0], CASES):
        m = json.loads((out / "manifest.json").read_text())
        assert m["complete"] and not m["testbed"]["shared_kernel"]
        assert m["hosts"][SERVER]["kernel"] == vmhost.artifacts().kernel_release
        assert m["hosts"][CLIENT]["kernel"] == os.uname().release != m["hosts"][SERVER]["kernel"]
        assert m["kernel_collectors"] == {CLIENT: "perf", SERVER: "lttng"}
        assert [c["id"] for c in m["cases"]] == [f"{t}-maxarg-{size}"]
        _no_losses_and_both_tracers(m)
        # each kernel recorded its packets both ways: the guest's LTTng session under lttng-modules' names
        kev = load_run(out).cases[0].kernel()
        kind, host = np.asarray(kev.kind), np.asarray(kev.cpu) // CPU_STRIDE
        for k in ("net_xmit", "net_receive"):
            assert all(((kind == KIND[k]) & (host == h)).sum() >= CALLS for h in (0, 1)), (t, size, k)


def _no_losses_and_both_tracers(m):
    for case in m["cases"]:
        assert case["losses"] == {"ust_discarded": 0, "ust_lost_packets": 0, "kernel_lost": 0}, case["id"]
        for h in (CLIENT, SERVER):
            assert case["per_host"][h]["events"]["kernel"] > CALLS, (case["id"], h, case["per_host"][h])
            assert case["per_host"][h]["events"]["ust"] > CALLS, (case["id"], h, case["per_host"][h])


@pytest.fixture(scope="module")
def rebuilt(vm_run):
    """{case id: (CaseRPCs, the case's clock fit from steps.json)}."""
    out = {}
    for run_dir in vm_run[0]:
        steps = json.loads((run_dir / "analysis" / "steps.json").read_text())
        fits = {r["case"]: r["clock_sync"] for r in steps["rtt"]}
        out.update({c.id: (reconstruct(c), fits[c.id]) for c in load_run(run_dir).cases})
    assert len(out) == len(CASES)
    return out


def test_every_rpc_has_kernel_steps_from_both_hosts(rebuilt):
    """The client's send (perf on this machine's kernel) and the server's send (LTTng in the guest's)
    are bounded by kernel events in every RPC, as are the client's request hand-off to its device,
    the server's reply hand-off to its own, and both hosts' recvfrom."""
    for cid, (r, _) in rebuilt.items():
        assert len(r) == CALLS, (cid, len(r), r.excluded)
        for step in ("C8", "C8'", "C18", "S4", "S9", "S9'"):
            st = r.rows[step].status
            assert (st == MEASURED).all(), (cid, step, r.rows[step].reasons)


def _packets(r):
    """Per RPC, on the client's clock (the analysis maps the server's events onto it): when the
    request's send syscall began on the client (C8's first occurrence) and when the server's first
    recvfrom returned (S4's end), and when the reply's send syscall began on the server (S9's last
    occurrence) and when the client's last recvfrom returned (C18's end): each packet left after the
    first and was there by the second.

    The device hand-off (net_dev_xmit, the end of C8' and S9') is no such bound on a VM: the virtio
    kick hands the frame to QEMU, and this machine's whole receive path (tap, bridge, veth, the
    client's wake-up) can run before the guest's tracepoint fires after the driver returns."""
    def times(step, k, j):
        return np.array([r.rows[step].occurrences(i)[k][j] for i in range(len(r))], np.float64)

    return {"a_to_b": (times("C8", 0, 0), times("S4", 0, 1)), "b_to_a": (times("S9", -1, 0), times("C18", -1, 1))}


def test_no_negative_one_way_delay(rebuilt):
    """With the server's events on the client's clock (the analysis's own estimate, offset and drift,
    convex hull over the RPC's user send/receive marks, applied), every request is received by the
    server after the client began sending it, and every reply by the client after the server began
    sending it."""
    for cid, (r, fit) in rebuilt.items():
        assert fit["applied"] and fit["quality"] in ("accurate", "approximate"), (cid, fit)
        pk = _packets(r)
        req = pk["a_to_b"][1] - pk["a_to_b"][0]
        rep = pk["b_to_a"][1] - pk["b_to_a"][0]
        assert (req > 0).all() and (rep > 0).all(), (cid, req.min(), rep.min(), fit)


def test_kernel_packets_confirm_the_clock_estimate(rebuilt):
    """An estimate from the kernel's syscall events (independent of the user marks the analysis fits),
    on the mapped clock, exists (both kernels' events are consistent with one linear clock relation)
    and puts the server's clock where the analysis did: zero offset within the analysis's bound."""
    for cid, (r, fit) in rebuilt.items():
        k = estimate(*_packets(r).values())
        assert k.quality != "failed", (cid, k.reason)
        assert abs(k.offset_ns) <= fit["accuracy_ns"], (cid, k.offset_ns, fit["accuracy_ns"])


def test_the_clock_estimate_agrees_with_the_ssh_check(rebuilt):
    """The capture's timestamp exchange over SSH before and after each case (collectors/clockcheck.py)
    puts the server's CLOCK_MONOTONIC where the convex hull does, within the two bounds."""
    for cid, (_, fit) in rebuilt.items():
        c = fit["check"]
        assert c and c.get("exchanges") == 2 and c["agrees"], (cid, c, fit["offset_ns"], fit["accuracy_ns"])


def test_the_round_trip_path_crosses_both_hosts(vm_run):
    """`rpcscope rtp` walks every call from the client to the guest and back: the path of most calls
    crosses to the server (a network segment) and holds the server's receive and send steps wherever it
    crosses; a call whose crossing the clocks cannot place (the guest's send mapped after the client's
    receive, or before the guest read the request, within a bound wider than the one-way delay) is not
    linked to another packet. Every path adds up to its call's RTT."""
    def frac(on, seg):
        return on.get(seg, {}).get("on_path_frac", 0.0)

    for out in vm_run[0]:
        rpcscope("rtp", str(out), "--quiet", timeout=600)
        for c in json.loads((out / "analysis" / "rtp.json").read_text())["cases"]:
            on = {p["segment"]: p for p in c["path"]}
            crossed = frac(on, "network")
            assert crossed >= 0.75, (c["case"], on.get("network"), on.get("unknown"))
            for seg in ("S4", "S9'"):
                assert frac(on, seg) >= crossed - 0.01, (c["case"], seg, on.get(seg), crossed)
            assert c["walked"] == CALLS and c["sum_check_max_abs_ns"] == 0, c["case"]
