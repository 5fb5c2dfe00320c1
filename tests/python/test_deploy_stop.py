"""What a stopped deploy leaves (rpcscope/deploy.py run_playbook): every process still running with its
controller temporary directory (ANSIBLE_LOCAL_TEMP) is killed before the directory is removed. No
testbed needed: real processes stand in for a playbook's forked workers."""
import os
import subprocess
import sys
import time

from rpcscope.deploy import _kill_processes_with_env


def _spawn(env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def test_the_processes_with_the_directory_go_and_no_other(tmp_path):
    mine = str(tmp_path / "rpcscope-ansible-local-x")
    workers = [_spawn({"ANSIBLE_LOCAL_TEMP": mine}) for _ in range(3)]
    other = _spawn({"ANSIBLE_LOCAL_TEMP": mine + "-another-run"})    # another deploy's: left alone
    bystander = _spawn({})
    try:
        t0 = time.monotonic()
        _kill_processes_with_env("ANSIBLE_LOCAL_TEMP", mine)
        assert time.monotonic() - t0 < 5
        for w in workers:
            assert w.wait(timeout=5) == -9
        assert other.poll() is None and bystander.poll() is None
    finally:
        for p in workers + [other, bystander]:
            p.kill()
            p.wait()


def test_none_to_kill_returns_at_once(tmp_path):
    t0 = time.monotonic()
    _kill_processes_with_env("ANSIBLE_LOCAL_TEMP", str(tmp_path / "nobody-has-this"))
    assert time.monotonic() - t0 < 2
