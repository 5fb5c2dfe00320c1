"""The two-host testbed and its Ansible deployment, for real: namespaces, sshd, ansible-playbook.

One module-scoped testbed goes through the whole life cycle, in order:
up (twice: idempotent), repair after a crash, deploy (twice: the second
changes nothing), smoke.yml, a 4000-byte echo unshaped and at 10mbit,
teardown.yml, down (nothing left), and up over a crashed run's leftovers.
Bad input (address clash, missing tool, non-root, bad options) must fail
with a clear message and build nothing.

Safety: every address is in 198.18.0.0/15 inside namespaces the test creates
(or on lo, for the clash check); every command has a timeout; the fixture
runs `rpcscope testbed down` even when a test fails.
"""
from __future__ import annotations

import glob
import json
import os
import pathlib
import pwd
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, RPCSCOPE, is_testbed_up, rpcscope, rpcscope_json, sh

from rpcscope.testbed.config import STATE_DIR
from rpcscope.testbed.lock import TEST_OWNER_ENV, held_by_tests
from rpcscope.testbed.sshd import ssh_argv

BIN = pathlib.Path(sys.executable).parent
INVENTORY = REPO / "ansible" / "inventories" / "local" / "hosts.yml"
CLIENT, SERVER = "rpcs-client", "rpcs-server"
CLIENT_ADDR, SERVER_ADDR = "198.18.0.2", "198.18.0.3"

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
    pytest.mark.skipif(not all(shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") for t in ("ip", "tc", "sshd")),
                       reason="needs iproute2 and openssh-server (make bootstrap)"),
]


def ansible_playbook(playbook, *extra, timeout=300):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), playbook, *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO / "ansible", env=env)


def leftovers():
    """Everything of the testbed that could remain on this machine."""
    found = []
    found += [f"netns {n}" for n in sh("ip", "netns", "list").stdout.split() if n.startswith("rpcs-")]
    for line in sh("ip", "-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith("rpcs-"):
            found.append(f"link {name}")
    if "rpcscope_testbed" in sh("nft", "list", "tables").stdout:
        found.append("nft table")
    for pid in sh("pgrep", "-f", "sshd.*rpcscope/testbed").stdout.split():
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":   # a killed daemon's zombie, waiting for init to reap it, is not running
            found.append(f"sshd {pid}")
    host_dirs = [pathlib.Path(root) / h for root in ("/opt/rpcscope", "/var/lib/rpcscope") for h in (CLIENT, SERVER)]
    for p in [STATE_DIR, INVENTORY, *host_dirs]:
        if p.exists():
            found.append(str(p))
    return found


def ansible_temporaries():
    """Ansible's temporary files that a stopped playbook could leave on this machine (the local testbed's
    hosts share its filesystem): module payloads in /tmp, the controller's and the hosts' ~/.ansible/tmp."""
    found = set(glob.glob("/tmp/ansible_*_payload_*")) | set(glob.glob("/tmp/rpcscope-ansible-local-*"))
    return found | set(glob.glob(os.path.expanduser("~/.ansible/tmp/ansible-*")))


def rtt_p50_echo4000(calls=60):
    """p50 RTT (ns) of a 4000-byte echo from the client host to the server host, across the link."""
    server_bin = f"/opt/rpcscope/{SERVER}/bin/rpc-server"
    client_bin = f"/opt/rpcscope/{CLIENT}/bin/rpc-client"
    ready = STATE_DIR / "echo-test.ready"
    ready.unlink(missing_ok=True)
    srv = subprocess.Popen(["ip", "netns", "exec", SERVER, server_bin, "--bind", SERVER_ADDR, "--port", "7101",
                            "--transport", "udp", "--duration", "60", "--ready-file", str(ready)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not ready.exists() and time.monotonic() < deadline and srv.poll() is None:
            time.sleep(0.02)
        assert ready.exists(), "rpc-server did not become ready in the server namespace"
        p = sh("ip", "netns", "exec", CLIENT, client_bin, "--server", SERVER_ADDR, "--port", "7101",
               "--proc", "echo", "--size", "4000", "--calls", str(calls), "--warmup", "5", "--json", timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        r = json.loads(p.stdout.strip().splitlines()[-1])
        assert r["errors"] == 0 and r["calls"] == calls, r
        return r["rtt_ns"]["p50"]
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait(timeout=5)


@pytest.fixture(scope="module", autouse=True)
def quiet_machine():
    """One test session at a time drives the machine's testbed (two clones testing at once would
    tear down each other's hosts); and none while someone's testbed is up."""
    with held_by_tests(wait=1200):
        if is_testbed_up():
            pytest.skip("a testbed is already up on this machine; the integration test would replace it "
                        "(run `rpcscope testbed down` first)")
        yield


@pytest.fixture(scope="module")
def testbed(quiet_machine):
    try:
        yield
    finally:
        rpcscope("testbed", "down", check=False, timeout=120)


# ---------------------------------------------------------------- bad input: clear message, nothing built

def test_bad_options_build_nothing():
    for args, words in [
        (["--subnet", "10.0.0.0/24"], "outside the benchmarking range"),
        (["--link-rate", "fast"], "not a rate"),
        (["--loss", "100"], "--loss"),
        (["--mtu", "100"], "--mtu"),
        (["--cpus", "0:1:2"], "--cpus"),
        (["--cpus", "999"], "not available"),
    ]:
        p = rpcscope("testbed", "up", *args, check=False)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert words in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr
    assert leftovers() == []


def test_non_root_is_refused():
    p = rpcscope("testbed", "up", check=False, user="65534")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "root" in p.stderr and "Traceback" not in p.stderr
    assert leftovers() == []


def test_missing_tool_is_refused(tmp_path):
    # A PATH with every tool the testbed needs except tc.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for t in ("ip", "sshd", "ssh-keygen", "ssh", "unshare", "hostname", "sysctl", "nft", "taskset", "setpriv"):
        real = shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if real:
            (bindir / t).symlink_to(real)
    p = rpcscope("testbed", "up", check=False, env={"PATH": str(bindir)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "'tc' was not found" in p.stderr
    assert leftovers() == []


def test_address_clash_is_refused():
    # Something else on this machine already uses 198.18.5.9: the testbed must not build on 198.18.5.0/24.
    sh("ip", "addr", "add", "198.18.5.9/32", "dev", "lo", check=True)
    try:
        p = rpcscope("testbed", "up", "--subnet", "198.18.5.0/24", check=False)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "address clash" in p.stderr and "198.18.5.9" in p.stderr
        assert leftovers() == []
    finally:
        sh("ip", "addr", "del", "198.18.5.9/32", "dev", "lo")


def test_run_stopped_by_sigterm_takes_down_the_testbed_it_started(tmp_path, signal_when_ready):
    """`rpcscope run` stopped by SIGTERM (a kill, CI cancelling the job, make passing on the signal it
    got) in the middle of its deploy: it says so, and the testbed it brought up is gone, as after
    Ctrl-C. Python's default for SIGTERM would have ended it with the hosts still up."""
    out = tmp_path / "run"
    before = ansible_temporaries()
    proc = subprocess.Popen(RPCSCOPE + ["run", "--sizes", "0,1392", "--holdout", "", "--calls", "100",
                                        "--out", str(out)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def deploying():
        return STATE_DIR.exists() and bool(sh("pgrep", "-f", "ansible-playbook").stdout.split())

    try:
        stdout, stderr = signal_when_ready(proc, deploying, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
            rpcscope("testbed", "down", check=False, timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "rpcscope run: interrupted" in stderr and "[2/" in stdout and "testbed down" in stdout, stdout + stderr
    assert leftovers() == []
    assert not sh("pgrep", "-f", "ansible-playbook").stdout.split()
    assert not out.exists()                          # it never got to the capture
    # Nor Ansible's temporary files: the controller's ansible-local-* (ANSIBLE_LOCAL_TEMP in a directory
    # rpcscope removes) and the killed modules' payloads on the hosts (TMPDIR in the host's directory).
    assert ansible_temporaries() - before == set()


# ---------------------------------------------------------------- the life cycle

class TestLifeCycle:
    def test_up_is_idempotent(self, testbed):
        first = rpcscope_json("testbed", "up")
        assert first["action"] == "created"
        assert [h["address"] for h in first["state"]["hosts"]] == [CLIENT_ADDR, SERVER_ADDR]
        assert first["state"]["control_address"] == "198.18.0.1"
        second = rpcscope_json("testbed", "up")
        assert second["action"] == "unchanged"
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["healthy"] and st["host_to_host"], st
        assert [h["ssh"] for h in st["hosts"]] == ["ok", "ok"]
        assert INVENTORY.exists()
        # Each host answers SSH as itself (its own UTS namespace), key-only.
        sshd_conf = (STATE_DIR / "hosts" / SERVER / "sshd_config").read_text()
        assert "PasswordAuthentication no" in sshd_conf and f"ListenAddress {SERVER_ADDR}:22" in sshd_conf
        # A module's temporary files stay in the host's own directory, gone with the testbed.
        assert f"SetEnv TMPDIR={STATE_DIR / 'hosts' / SERVER / 'tmp'}" in sshd_conf
        assert (STATE_DIR / "hosts" / SERVER / "tmp").is_dir()
        # A command runs without the login shell's start-up files: bash started by sshd reads ~/.bashrc
        # only at SHLVL 1, and the host's sessions start nested (a .bashrc's `pyenv rehash` lock, left by
        # a stopped deploy, had made every later command wait 60 s).
        p = sh(*ssh_argv(), f"root@{SERVER_ADDR}", "echo $SHLVL")
        bash = os.path.basename(pwd.getpwnam("root").pw_shell) == "bash"
        assert p.returncode == 0 and p.stdout.strip() == ("2" if bash else "1"), (p.stdout, p.stderr)

    def test_up_or_down_from_outside_the_test_is_refused(self, testbed):
        """A `testbed down` typed in a shell while a test run uses the testbed would pull the hosts from
        under it: refused, with what to do, and the testbed stays up."""
        outside = {k: v for k, v in os.environ.items() if k != TEST_OWNER_ENV}
        for action in ("down", "up"):
            p = subprocess.run(RPCSCOPE + ["testbed", action], capture_output=True, text=True, timeout=60,
                               cwd=REPO, env=outside)
            assert p.returncode == 2 and "a test run is using the testbed" in p.stderr, p.stderr
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["healthy"], st

    def test_up_repairs_a_crashed_testbed(self, testbed):
        pid = int((STATE_DIR / "hosts" / SERVER / "sshd.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        st = json.loads(rpcscope("testbed", "status", "--json", check=False).stdout)
        assert not st["healthy"]
        again = rpcscope_json("testbed", "up")
        assert again["action"] == "rebuilt"
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["healthy"] and st["host_to_host"], st

    def test_deploy_twice_second_changes_nothing(self, testbed):
        first = rpcscope_json("deploy", timeout=900)
        assert first["ok"], json.dumps(first, indent=1)[-4000:]
        assert set(first["recap"]) == {CLIENT, SERVER}
        second = rpcscope_json("deploy", timeout=900)
        assert second["ok"], json.dumps(second, indent=1)[-4000:]
        assert second["changed"] == 0, second["changed_tasks"]
        for host in (CLIENT, SERVER):
            rep = second["tracing"][host]
            assert rep["tracefs"] == "mounted" and rep["lttng_sessiond"] == "running", rep
            assert pathlib.Path(f"/opt/rpcscope/{host}/bin/rpc-server").exists()

    def test_smoke_playbook(self, testbed, tmp_path):
        p = ansible_playbook("smoke.yml", "-e", f"smoke_results_dir={tmp_path}")
        assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-2000:]
        r = json.loads((tmp_path / CLIENT / "smoke-null.json").read_text())
        assert r["proc"] == "null" and r["calls"] == 2000 and r["errors"] == 0, r
        assert 1_000 < r["rtt_ns"]["p50"] < 10_000_000, r["rtt_ns"]   # 1 us .. 10 ms on a veth link

    def test_link_rate_10mbit_slows_a_4000_byte_echo(self, testbed):
        unshaped = rtt_p50_echo4000()
        r = rpcscope_json("testbed", "up", "--link-rate", "10mbit")
        assert r["action"] == "reconfigured"
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["link"]["rate"] == "10mbit" and [h["qdisc"] for h in st["hosts"]] == ["tbf", "tbf"]
        shaped = rtt_p50_echo4000()
        print(f"4000-byte echo p50: unshaped {unshaped / 1e3:.1f} us, 10mbit {shaped / 1e3:.1f} us")
        # 4000 bytes each way at 10 Mbit/s is over 3 ms of serialisation per direction after the first frame.
        assert shaped > unshaped + 2_000_000 and shaped > 5 * unshaped, (unshaped, shaped)
        rpcscope_json("testbed", "up")   # back to unshaped for what follows

    def test_mtu_loss_and_cpus_are_applied_and_undone(self, testbed):
        cpus = "0:1" if len(os.sched_getaffinity(0)) >= 2 and {0, 1} <= os.sched_getaffinity(0) else "0"
        r = rpcscope_json("testbed", "up", "--mtu", "9000", "--loss", "2", "--cpus", cpus)
        assert r["action"] == "reconfigured"
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["healthy"] and st["host_to_host"] and st["link"]["mtu"] == 9000 and st["link"]["loss_percent"] == 2
        assert "mtu 9000" in sh("ip", "-n", CLIENT, "link", "show", "dev", "rpcs-c0").stdout
        assert "numgen random mod 10000 < 200" in sh("nft", "list", "table", "bridge", "rpcscope_testbed").stdout
        want = cpus.split(":")
        for host, cpu in zip((CLIENT, SERVER), want * (2 // len(want))):
            pid = (STATE_DIR / "hosts" / host / "sshd.pid").read_text().strip()
            status = pathlib.Path(f"/proc/{pid}/status").read_text()
            assert f"Cpus_allowed_list:\t{cpu}\n" in status, (host, cpu)
        r = rpcscope_json("testbed", "up")
        assert r["action"] == "reconfigured"
        assert "rpcscope_testbed" not in sh("nft", "list", "tables").stdout
        assert "mtu 1500" in sh("ip", "-n", CLIENT, "link", "show", "dev", "rpcs-c0").stdout

    def test_teardown_playbook(self, testbed):
        p = ansible_playbook("teardown.yml")
        assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-2000:]

    def test_down_leaves_nothing(self, testbed):
        p = rpcscope("testbed", "down")
        assert "removed" in p.stdout
        assert leftovers() == []
        p = rpcscope("testbed", "down")
        assert "nothing to remove" in p.stdout

    def test_up_cleans_leftovers_of_a_crashed_run(self, testbed):
        # A crashed run left a namespace and the bridge, and no state.
        sh("ip", "netns", "add", CLIENT, check=True)
        sh("ip", "link", "add", "rpcs-br0", "type", "bridge", check=True)
        r = rpcscope_json("testbed", "up")
        assert r["action"] == "rebuilt", r
        st = json.loads(rpcscope("testbed", "status", "--json").stdout)
        assert st["healthy"] and st["host_to_host"]
        rpcscope("testbed", "down")
        assert leftovers() == []

    def test_a_record_that_outlived_its_testbed_is_gone_and_cleared(self, testbed, tmp_path):
        """A state directory whose every part is gone (the machine restarted under it, or the directory
        was copied to a machine without them): status says GONE, a capture names what is missing, and
        the tests take it for no testbed, clearing it with `down`."""
        record = rpcscope_json("testbed", "up")["state"]
        rpcscope("testbed", "down")
        STATE_DIR.mkdir(parents=True)
        (STATE_DIR / "state.json").write_text(json.dumps(record))
        p = rpcscope("testbed", "status", check=False)
        assert p.returncode == 1 and "GONE" in p.stdout and "`rpcscope testbed down` clears" in p.stdout, p.stdout
        st = json.loads(rpcscope("testbed", "status", "--json", check=False).stdout)
        assert st["gone"] and not st["healthy"], st
        p = rpcscope("capture", "--sizes", "0", "--calls", "10", "--warmup", "0", "--calibration", "none",
                     "--out", str(tmp_path / "run"), check=False)
        assert p.returncode == 2 and "not healthy" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not (tmp_path / "run").exists()
        assert not is_testbed_up() and not STATE_DIR.exists()
        assert leftovers() == []
