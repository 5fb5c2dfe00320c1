"""The system's tools as the testbed runs them: found on PATH, bounded in time, a failure as a UserError
naming the command; and what they show (namespaces, links, the nft table, processes, an open port)."""
import json
import os
import pathlib
import shutil
import socket
import subprocess

from rpcscope.output import UserError

from .config import NFT_FAMILY, NFT_TABLE, SSHD_PORT

CMD_TIMEOUT = 20          # seconds for any one command the testbed runs
SYS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def tool_env():
    env = dict(os.environ)
    path = env.get("PATH", "")
    # sbin tools (ip, tc, nft, sshd) are looked up on PATH; keep a user's PATH
    # first so that a missing tool can be simulated, but never lose sbin when
    # PATH is unset.
    env["PATH"] = path if path else SYS_PATH
    return env


def tool(name):
    path = shutil.which(name, path=tool_env()["PATH"])
    if not path:
        raise UserError(f"'{name}' was not found on PATH; install it (make bootstrap installs "
                        f"iproute2, nftables, openssh-server, util-linux) and try again")
    return path


def run(argv, check=True, input=None, timeout=CMD_TIMEOUT):
    """Run a command, bounded in time; return CompletedProcess (text)."""
    try:
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=tool_env())
    except subprocess.TimeoutExpired:
        raise UserError(f"command timed out after {timeout}s: {' '.join(argv)}") from None
    except FileNotFoundError:
        raise UserError(f"command not found: {argv[0]}") from None
    if check and p.returncode != 0:
        raise CommandFailed(argv, p)
    return p


class CommandFailed(UserError):
    def __init__(self, argv, p):
        msg = (p.stderr or p.stdout or "").strip().splitlines()
        super().__init__(f"'{' '.join(argv)}' failed (exit {p.returncode}): {msg[-1] if msg else 'no output'}")
        self.returncode = p.returncode


def ns_run(ns, argv, **kw):
    return run([tool("ip"), "netns", "exec", ns] + argv, **kw)


def netns_list():
    p = run([tool("ip"), "-j", "netns", "list"], check=False)
    if p.returncode != 0:
        return []
    try:
        return [n["name"] for n in json.loads(p.stdout or "[]")]
    except (ValueError, KeyError):
        return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def link_exists(name, ns=None):
    argv = [tool("ip")] + (["-n", ns] if ns else []) + ["link", "show", "dev", name]
    return run(argv, check=False).returncode == 0


def nft_table_exists():
    nft = shutil.which("nft", path=tool_env()["PATH"])
    if not nft:
        return False
    p = run([nft, "list", "table", NFT_FAMILY, NFT_TABLE], check=False)
    return p.returncode == 0


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path):
    try:
        return int(pathlib.Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tcp_reachable(addr, port=SSHD_PORT, timeout=1.0):
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False
