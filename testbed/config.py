"""The testbed's names and addresses, and `testbed up`'s options checked and turned into a configuration:
the subnet, the two hosts (a namespace each, or a QEMU guest), the link and the CPUs."""
import ipaddress
import os
import pathlib
import re

from rpcscope import ROOT
from rpcscope.output import UserError
from rpcscope.units import UnitError, parse_rate

from . import vmhost

STATE_DIR = pathlib.Path(os.environ.get("RPCSCOPE_TESTBED_DIR", "/run/rpcscope/testbed"))
INVENTORY = ROOT / "ansible" / "inventories" / "local" / "hosts.yml"
BENCH_NET = ipaddress.ip_network("198.18.0.0/15")
BRIDGE = "rpcs-br0"
NFT_FAMILY, NFT_TABLE = "bridge", "rpcscope_testbed"
DEFAULT_SUBNET = "198.18.0.0/24"
DEFAULT_CLIENT, DEFAULT_SERVER = "rpcs-client", "rpcs-server"
SSHD_PORT = 22
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PRIVSEP_DIR = pathlib.Path("/run/sshd")
# What the Ansible roles install on a local testbed host. The hosts share this
# machine's filesystem, so the inventory gives each host its own directories;
# `down` removes them so that the machine is left as it was.
HOST_FILE_ROOTS = (pathlib.Path("/opt/rpcscope"), pathlib.Path("/var/lib/rpcscope"))


def link_rate(text):
    """--link-rate in bits per second, None for unshaped; a UserError for a bad one."""
    try:
        return parse_rate(text)
    except UnitError as e:
        raise UserError(f"--link-rate {e}") from None


def parse_cpus(text, names):
    """'0:1' -> {client: '0', server: '1'}; '0' -> both on CPU 0; None -> no pinning."""
    if not text:
        return {}
    parts = text.split(":")
    if len(parts) == 1:
        parts = parts * len(names)
    if len(parts) != len(names):
        raise UserError(f"--cpus {text!r}: give one CPU list for all hosts or one per host "
                        f"separated by ':' (client:server), e.g. 0:1 or 0-1:1")
    online = os.sched_getaffinity(0)
    out = {}
    for name, spec in zip(names, parts):
        cpus = set()
        for item in spec.split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
            if not m:
                raise UserError(f"--cpus {text!r}: {item!r} is not a CPU number or range (e.g. 0, 0-1, 0,2)")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            cpus.update(range(lo, hi + 1))
        if not cpus or not cpus <= online:
            raise UserError(f"--cpus {text!r}: CPUs {sorted(cpus - online)} are not available here "
                            f"(this machine offers {sorted(online)})")
        out[name] = spec
    return out


def make_config(args):
    try:
        subnet = ipaddress.ip_network(args.subnet, strict=True)
    except ValueError as e:
        raise UserError(f"--subnet {args.subnet!r} is not a network: {e}") from None
    if subnet.version != 4 or not subnet.subnet_of(BENCH_NET):
        raise UserError(f"--subnet {subnet} is outside the benchmarking range {BENCH_NET}; "
                        f"pick a /24..../29 inside it, e.g. 198.18.7.0/24")
    if subnet.num_addresses < 8:
        raise UserError(f"--subnet {subnet} is too small; use a /29 or larger")
    # `--server vm` / `--client vm`: that host is a QEMU guest with its own kernel (testbed/vmhost.py).
    kinds = ["vm" if n == "vm" else "netns" for n in (args.client, args.server)]
    names = [DEFAULT_CLIENT if args.client == "vm" else args.client,
             DEFAULT_SERVER if args.server == "vm" else args.server]
    if "vm" in kinds and link_rate(args.link_rate):
        raise UserError("--link-rate shapes each host's interface inside its namespace; a VM host has none on "
                        "this machine: leave --link-rate out with --client vm or --server vm")
    for n in names:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", n):
            raise UserError(f"host name {n!r}: use lower-case letters, digits and '-', starting with a letter")
    if len(set(names)) != len(names):
        raise UserError("the client and the server need different names")
    if not 576 <= args.mtu <= 65535:
        raise UserError(f"--mtu {args.mtu} is out of range (576..65535)")
    if not 0 <= args.loss < 100:
        raise UserError(f"--loss {args.loss} must be a percentage from 0 up to (not including) 100")
    hosts_ip = list(subnet.hosts())
    roles = ["client", "server"]
    hosts = []
    for i, (name, role) in enumerate(zip(names, roles)):
        tag = role[0] + "0"       # c0, s0: unique, short interface names
        # A VM host's NIC is the guest's; its tap on the bridge takes the veth's name.
        hosts.append({"name": name, "role": role, "address": str(hosts_ip[i + 1]), "kind": kinds[i],
                      "ifname": vmhost.GUEST_IFNAME if kinds[i] == "vm" else f"rpcs-{tag}",
                      "peer_ifname": f"rpcs-{tag}-br"})
    return {
        "subnet": str(subnet), "prefixlen": subnet.prefixlen,
        "control_address": str(hosts_ip[0]), "bridge": BRIDGE,
        "hosts": hosts,
        "link": {"rate_bit": link_rate(args.link_rate), "mtu": args.mtu, "loss_percent": float(args.loss)},
        "cpus": parse_cpus(args.cpus, names),
    }
