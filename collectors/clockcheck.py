"""An independent check of the hosts' clocks: a timestamp exchange over SSH around each case.

For each host of the inventory, one SSH session runs a small Python loop on the host that answers
every line it reads with its CLOCK_MONOTONIC in ns; this machine sends ROUNDS lines and notes its
own CLOCK_MONOTONIC before and after each answer. The sample with the smallest round trip gives the
host's offset from this machine, ``host - here = t_host - (t_send + t_back) / 2``, within half that
round trip. `rpcscope capture --inventory` takes one before a case and one after it (the manifest's
cases[].clock_check); the analysis (analysis/timeline.py) takes the server's offset from the client
as the difference of theirs (the bounds add up), puts the two on a line and compares it with the
convex-hull estimate at the estimate's reference time.

    from rpcscope.collectors.clockcheck import check, ssh_commands
    cmds = ssh_commands("ansible/inventories/local/hosts.yml")     # {host: [ssh, ...]}
    check(cmds)          # {"method", "hosts": {host: {"offset_ns", "rtt_ns", "at_ns", "samples"}}}
"""
import pathlib
import shlex
import subprocess
import time

import yaml

ROUNDS = 16
METHOD = (f"ssh timestamp exchange: {ROUNDS} round trips per host, the minimum-RTT sample "
          "(offset = t_host - midpoint, bound = RTT/2) (collectors/clockcheck.py)")
_REMOTE = ("python3 -u -c 'import sys, time\n"
           "print(0, flush=True)\n"
           "while sys.stdin.readline():\n"
           "    print(time.clock_gettime_ns(time.CLOCK_MONOTONIC), flush=True)\n'")


def ssh_commands(inventory):
    """{host: the ssh command line reaching it} from an Ansible YAML inventory's connection variables
    (ansible_host, ansible_user, ansible_port, ansible_ssh_private_key_file, ansible_ssh_common_args),
    inherited from groups as Ansible does; {} where the inventory cannot be read."""
    try:
        inv = yaml.safe_load(pathlib.Path(inventory).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    out = {}

    def walk(group, inherited):
        if not isinstance(group, dict):
            return
        gvars = {**inherited, **(group.get("vars") or {})}
        for name, hv in (group.get("hosts") or {}).items():
            v = {**gvars, **(hv or {})}
            cmd = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
            if v.get("ansible_port"):
                cmd += ["-p", str(v["ansible_port"])]
            if v.get("ansible_ssh_private_key_file"):
                cmd += ["-i", str(v["ansible_ssh_private_key_file"])]
            cmd += shlex.split(str(v.get("ansible_ssh_common_args") or ""))
            user = v.get("ansible_user")
            addr = v.get("ansible_host", name)
            out[name] = cmd + [f"{user}@{addr}" if user else str(addr)]
        for child in (group.get("children") or {}).values():
            walk(child, gvars)

    walk(inv.get("all", inv), {})
    return out


def exchange(cmd, rounds=ROUNDS, timeout=60.0):
    """One host: {"offset_ns" (host - here), "rtt_ns", "at_ns" (here, the kept sample's midpoint),
    "samples"}; raises OSError or TimeoutError naming what failed."""
    p = subprocess.Popen(cmd + [_REMOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, bufsize=1)
    deadline = time.monotonic() + timeout
    try:
        if p.stdout.readline().strip() != "0":
            raise OSError(f"{' '.join(cmd[-1:])}: the timestamp loop did not start: "
                          f"{p.stderr.read(500).strip() or 'no output'}")
        best = None
        for _ in range(rounds):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{cmd[-1]}: the timestamp exchange took over {timeout:.0f} s")
            t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            p.stdin.write("t\n")
            line = p.stdout.readline()
            t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            if not line.strip().isdigit():
                raise OSError(f"{cmd[-1]}: the timestamp loop answered {line.strip()[:80]!r}")
            mid = t0 + (t1 - t0) // 2
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, int(line) - mid, mid)
        return {"offset_ns": best[1], "rtt_ns": best[0], "at_ns": best[2], "samples": rounds}
    finally:
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def check(commands):
    """The exchange with every host ({host: ssh command}): {"method", "hosts": {host: exchange()}}, or
    {"method", "error": one line} where a host cannot be reached (the capture goes on without it). The
    analysis puts the server's offset against the client's (analysis/timeline.py)."""
    out = {"method": METHOD, "hosts": {}}
    try:
        for host, cmd in commands.items():
            out["hosts"][host] = exchange(cmd)
    except (OSError, TimeoutError, ValueError) as e:
        return {"method": METHOD, "error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return out
