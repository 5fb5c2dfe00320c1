"""What `testbed up` checks before it builds anything: root, the tools, and a subnet nothing else uses."""
import ipaddress
import json
import os
import pathlib

from rpcscope.output import UserError

from .config import BENCH_NET, BRIDGE, SFTP_SERVER
from .system import run, tool


def require_root():
    if os.geteuid() != 0:
        raise UserError("the testbed creates network namespaces, links and an sshd per host, which needs root; "
                        "run it as root (e.g. sudo .venv/bin/rpcscope testbed up)")


def require_capabilities(cfg=None):
    for t in ("ip", "tc", "sshd", "ssh-keygen", "ssh", "unshare", "hostname", "sysctl"):
        tool(t)
    if cfg and cfg["link"]["loss_percent"] > 0:
        tool("nft")
    if cfg and cfg["cpus"]:
        tool("taskset")
    if not pathlib.Path(tool("sshd")).is_absolute():
        raise UserError("sshd must be found at an absolute path")
    p = run([tool("ip"), "netns", "list"], check=False)
    if p.returncode != 0:
        raise UserError(f"'ip netns' does not work here ({(p.stderr or '').strip()}); the testbed needs "
                        f"network namespaces (iproute2 with netns support, a kernel with CONFIG_NET_NS)")
    p = run([tool("tc"), "qdisc", "show", "dev", "lo"], check=False)
    if p.returncode != 0:
        raise UserError(f"'tc' does not work here ({(p.stderr or '').strip()}); install iproute2")
    if not pathlib.Path(SFTP_SERVER).exists():
        raise UserError(f"{SFTP_SERVER} is missing; install openssh-sftp-server (make bootstrap does)")


def check_address_clash(cfg, ours_present):
    """Refuse a subnet that anything else on this machine already uses."""
    subnet = ipaddress.ip_network(cfg["subnet"])
    p = run([tool("ip"), "-j", "-4", "addr", "show"])
    ours = {BRIDGE} if ours_present else set()
    for link in json.loads(p.stdout or "[]"):
        if link.get("ifname") in ours:
            continue
        for a in link.get("addr_info", []):
            net = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            if net.overlaps(subnet):
                raise UserError(f"address clash: {a['local']}/{a['prefixlen']} on {link.get('ifname')} overlaps the "
                                f"testbed subnet {subnet}; choose another with --subnet (inside {BENCH_NET}) "
                                f"or remove that address. Nothing was built.")
    p = run([tool("ip"), "-j", "-4", "route", "show", "table", "all"], check=False)
    for r in json.loads(p.stdout or "[]") if p.returncode == 0 else []:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("dev") in ours:
            continue
        try:
            net = ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False)
        except ValueError:
            continue
        if net.overlaps(subnet) and r.get("type") not in ("local", "broadcast"):
            raise UserError(f"address clash: a route to {dst} via {r.get('dev')} overlaps the testbed subnet "
                            f"{subnet}; choose another with --subnet. Nothing was built.")
