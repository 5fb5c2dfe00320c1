"""`rpcscope testbed up | down | status`: a two-host testbed on one machine.

Two hosts are network namespaces (default `rpcs-client` and `rpcs-server`),
each with a veth pair into a bridge in the root namespace. The root namespace
is the control node: it holds the bridge's address and reaches the hosts over
SSH like real machines. Every address is in the benchmarking range
198.18.0.0/15. Each host runs its own sshd, bound to its testbed address only,
with key-only authentication (a key pair that `up` generates into the state
directory) and its own hostname (a UTS namespace).

Link settings: `--link-rate` (tc tbf on each host's interface, so both
directions are shaped), `--mtu`, `--loss` (an nftables bridge table that drops
a random share of the frames forwarded between the hosts; control traffic to
and from the bridge address is never dropped), `--cpus` (sshd, and so every
process started over SSH, is pinned with taskset).

Everything the testbed makes is named here and recorded in the state
directory, so that `down` (and `up`, after a crashed run) removes all of it.
"""
import argparse
import contextlib
import datetime
import fcntl
import ipaddress
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time

from rpcscope import ROOT
from rpcscope.collectors import leftovers
from rpcscope.output import UserError, emit_json, table

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
CMD_TIMEOUT = 20          # seconds for any one command the testbed runs
LOCK_PATH = pathlib.Path(os.environ.get("RPCSCOPE_TESTBED_LOCK", "/run/rpcscope-testbed.lock"))
LOCK_WAIT = 300           # seconds `up`/`down` wait for another one to finish
# The tests that drive the testbed hold this lock for as long as they use it, and mark their own
# `rpcscope` commands with TEST_OWNER_ENV; an `up` or `down` from anywhere else would pull the hosts
# from under the test, and is refused.
TEST_LOCK_PATH = pathlib.Path("/run/lock/rpcscope-testbed-test.lock")
TEST_OWNER_ENV = "RPCSCOPE_TESTBED_TEST"
SYS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

EPILOG = """examples:
  rpcscope testbed up                              two hosts, unshaped veth link
  rpcscope testbed up --link-rate 10mbit           the papers' 10 Mbit/s Ethernet
  rpcscope testbed up --mtu 9000 --loss 0.5        jumbo frames, 0.5% frame loss
  rpcscope testbed up --cpus 0:1                   client on CPU 0, server on CPU 1
  rpcscope testbed status --json                   hosts, addresses, link, reachability
  rpcscope testbed down                            remove everything `up` made

Then: rpcscope deploy; cd ansible && ansible-playbook -i inventories/local smoke.yml
"""


# ---------------------------------------------------------------- small helpers

def _env():
    env = dict(os.environ)
    path = env.get("PATH", "")
    # sbin tools (ip, tc, nft, sshd) are looked up on PATH; keep a user's PATH
    # first so that a missing tool can be simulated, but never lose sbin when
    # PATH is unset.
    env["PATH"] = path if path else SYS_PATH
    return env


def tool(name):
    path = shutil.which(name, path=_env()["PATH"])
    if not path:
        raise UserError(f"'{name}' was not found on PATH; install it (make bootstrap installs "
                        f"iproute2, nftables, openssh-server, util-linux) and try again")
    return path


def run(argv, check=True, input=None, timeout=CMD_TIMEOUT):
    """Run a command, bounded in time; return CompletedProcess (text)."""
    try:
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, env=_env())
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
    nft = shutil.which("nft", path=_env()["PATH"])
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


@contextlib.contextmanager
def held_by_tests(wait=1200):
    """The integration tests' hold on the testbed: TEST_LOCK_PATH locked (one test module at a time
    on this machine) and TEST_OWNER_ENV set for the commands they run meanwhile."""
    before = os.environ.get(TEST_OWNER_ENV)
    with exclusive(wait=wait, remove_after=True, path=TEST_LOCK_PATH):
        os.environ[TEST_OWNER_ENV] = "1"
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(TEST_OWNER_ENV, None)
            else:
                os.environ[TEST_OWNER_ENV] = before


def refuse_while_a_test_holds_it(action):
    """UserError when a test run holds the testbed (TEST_LOCK_PATH) and this command is not its own."""
    if os.environ.get(TEST_OWNER_ENV):
        return
    try:
        fd = os.open(TEST_LOCK_PATH, os.O_RDONLY)
    except OSError:
        return                                  # no test lock: no test running
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(f"a test run is using the testbed (it holds {TEST_LOCK_PATH}); `rpcscope testbed "
                        f"{action}` now would pull its hosts from under it. Wait for the test run to "
                        f"finish, then try again") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(wait=LOCK_WAIT, remove_after=False, path=None):
    """One `up` or `down` at a time on this machine (they share names and the state directory).

    `down` removes the lock file when it is done (leaving nothing behind); a
    waiter that then holds a lock on the removed file notices and locks anew.
    """
    path = pathlib.Path(path or LOCK_PATH)
    deadline = time.monotonic() + wait
    while True:
        f = open(path, "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            if time.monotonic() > deadline:
                raise UserError(f"another `rpcscope testbed` command has held {path} for {wait}s; "
                                f"wait for it to finish and try again") from None
            time.sleep(0.2)
            continue
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    try:
        yield
    finally:
        if remove_after:
            path.unlink(missing_ok=True)
        f.close()


# ---------------------------------------------------------------- parsing input

RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)?$", re.I)
RATE_MULT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
             "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_rate(text):
    """'10mbit' -> bits per second (int); None/'none'/'0' -> None (unshaped)."""
    if text is None or str(text).lower() in ("", "none", "0", "off"):
        return None
    m = RATE_RE.match(str(text).strip())
    if not m:
        raise UserError(f"--link-rate {text!r} is not a rate; use e.g. 10mbit, 100mbit, 1gbit or none")
    bits = int(float(m.group(1)) * RATE_MULT[(m.group(2) or "bit").lower()])
    if not 8000 <= bits <= 100_000_000_000:
        raise UserError(f"--link-rate {text!r} is out of range (8kbit to 100gbit)")
    return bits


def fmt_rate(bits):
    if not bits:
        return "unshaped"
    for unit, mult in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= mult and bits % mult == 0:
            return f"{bits // int(mult)}{unit}"
    return f"{bits}bit"


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
    if "vm" in kinds and parse_rate(args.link_rate):
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
        "link": {"rate_bit": parse_rate(args.link_rate), "mtu": args.mtu, "loss_percent": float(args.loss)},
        "cpus": parse_cpus(args.cpus, names),
    }


# ---------------------------------------------------------------- checks before building

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


# ---------------------------------------------------------------- state

def state_path():
    return STATE_DIR / "state.json"


def load_state():
    try:
        return json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None


def save_state(st):
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(st, indent=2) + "\n")
    tmp.replace(state_path())


def host_dir(name):
    return STATE_DIR / "hosts" / name


def sshd_pid(name):
    pid = read_pid(host_dir(name) / "sshd.pid")
    return pid if pid and pid_alive(pid) else None


def health(st):
    """What is wrong with a recorded testbed ([] when healthy)."""
    problems = []
    nss = set(netns_list())
    if not link_exists(st["bridge"]):
        problems.append(f"bridge {st['bridge']} is missing")
    for h in st["hosts"]:
        if vmhost.is_vm(h):
            problems += vmhost.health(h, host_dir(h["name"]), link_exists)
            continue
        if h["name"] not in nss:
            problems.append(f"namespace {h['name']} is missing")
            continue
        if not link_exists(h["peer_ifname"]):
            problems.append(f"link {h['peer_ifname']} is missing")
        if not sshd_pid(h["name"]):
            problems.append(f"sshd of {h['name']} is not running")
    if st["link"].get("loss_percent") and not nft_table_exists():
        problems.append(f"nft table {NFT_FAMILY} {NFT_TABLE} is missing")
    return problems


# ---------------------------------------------------------------- teardown

def teardown(st, say=print):
    """Remove everything a testbed (recorded in st, or by default names) may have made. Idempotent."""
    removed = []
    names = {DEFAULT_CLIENT, DEFAULT_SERVER}
    ifnames = {"rpcs-c0", "rpcs-s0"}
    if st:
        names |= {h["name"] for h in st.get("hosts", [])}
    peer_ifs = {f"{i}-br" for i in ifnames}
    if st:
        peer_ifs |= {h["peer_ifname"] for h in st.get("hosts", [])}

    # 1. ssh ControlMaster connections opened through the testbed's ControlPath.
    cp = STATE_DIR / "cp"
    if cp.is_dir() and shutil.which("ssh", path=_env()["PATH"]):
        for sock in sorted(cp.iterdir())[:100]:
            run([tool("ssh"), "-o", f"ControlPath={sock}", "-O", "exit", "testbed"], check=False, timeout=5)
            removed.append(f"ssh master connection {sock.name[:12]}")

    # 2. Every process in the testbed's namespaces: sshd, its sessions, whatever they started.
    present = [n for n in netns_list() if n in names]
    for ns in present:
        pids = _ns_pids(ns)
        if pids:
            _stop_pids(pids)
            removed.append(f"{len(pids)} process(es) in {ns} (sshd and its sessions)")
    # sshd by pid file, in case a namespace went away under it.
    for n in names:
        pid = read_pid(host_dir(n) / "sshd.pid")
        if pid and pid_alive(pid) and _is_our_sshd(pid):
            _stop_pids([pid])
            removed.append(f"sshd of {n} (pid {pid})")

    # The VM hosts' QEMUs, by pid file or by their command line naming this state directory.
    qemus = vmhost.stray_qemus(STATE_DIR)
    if qemus:
        vmhost.stop(qemus)
        removed.append(f"{len(qemus)} QEMU guest(s) (VM hosts)")

    # 3. The loss rules.
    if nft_table_exists():
        run([tool("nft"), "delete", "table", NFT_FAMILY, NFT_TABLE], check=False)
        removed.append(f"nft table {NFT_FAMILY} {NFT_TABLE}")

    # 4. Links, namespaces, bridge.
    for ifn in sorted(peer_ifs):
        if link_exists(ifn):
            run([tool("ip"), "link", "del", "dev", ifn], check=False)
            removed.append(f"veth {ifn}")
    for ns in present:
        run([tool("ip"), "netns", "del", ns], check=False)
        removed.append(f"namespace {ns}")
    if link_exists(BRIDGE):
        run([tool("ip"), "link", "del", "dev", BRIDGE], check=False)
        removed.append(f"bridge {BRIDGE}")

    # 5. Files: what deploy installed per host, the privilege separation dir if
    #    we made it, the inventory, the state dir.
    for root in HOST_FILE_ROOTS:
        for n in sorted(names):
            d = root / n
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
                removed.append(f"host files {d}")
        try:
            root.rmdir()     # only when nothing else lives there
        except OSError:
            pass
    if st and st.get("created_privsep_dir") and PRIVSEP_DIR.is_dir():
        try:
            PRIVSEP_DIR.rmdir()
            removed.append(str(PRIVSEP_DIR))
        except OSError:
            pass
    if INVENTORY.exists():
        INVENTORY.unlink()
        removed.append(f"inventory {INVENTORY.relative_to(ROOT)}")
        try:
            INVENTORY.parent.rmdir()
        except OSError:
            pass
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        removed.append(f"state directory {STATE_DIR}")
        try:
            STATE_DIR.parent.rmdir()   # /run/rpcscope, if nothing else lives there
        except OSError:
            pass
    for line in removed:
        say(f"  removed {line}")
    return removed


def _ns_pids(ns):
    p = run([tool("ip"), "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit() and int(x) != os.getpid()]


def _is_our_sshd(pid):
    try:
        cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return "sshd" in cmd and str(STATE_DIR) in cmd


def _stop_pids(pids, grace=5.0):
    vmhost.stop(pids, grace, alive=pid_alive)


# ---------------------------------------------------------------- building

def build(cfg, say=print):
    """Build the testbed from nothing. On any failure the caller tears it down."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(STATE_DIR, 0o700)
    st = dict(cfg)
    st["state_dir"] = str(STATE_DIR)
    st["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    st["created_privsep_dir"] = False
    save_state(st)   # from here on, teardown knows what to remove

    # Keys: the control node's client key pair and each host's host key.
    key = STATE_DIR / "id_ed25519"
    if not key.exists():
        run([tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", "rpcscope-testbed", "-f", str(key)])
    (STATE_DIR / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    os.chmod(STATE_DIR / "authorized_keys", 0o600)
    (STATE_DIR / "cp").mkdir(exist_ok=True)

    ip = tool("ip")
    mtu = str(cfg["link"]["mtu"])
    run([ip, "link", "add", "name", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
    _sysctl(None, f"net.ipv6.conf.{BRIDGE}.disable_ipv6", "1")
    run([ip, "addr", "add", f"{cfg['control_address']}/{cfg['prefixlen']}", "dev", BRIDGE])
    run([ip, "link", "set", "dev", BRIDGE, "mtu", mtu, "up"])
    say(f"  bridge {BRIDGE} {cfg['control_address']}/{cfg['prefixlen']} (control node)")

    if any(vmhost.is_vm(h) for h in cfg["hosts"]):
        st["vm"] = {"acceleration": vmhost.acceleration(), "kernel": vmhost.artifacts().kernel_release}
        save_state(st)
    for h in cfg["hosts"]:
        if vmhost.is_vm(h):
            vmhost.add_tap(run, ip, h, BRIDGE, mtu)
            say(f"  host {h['name']}: tap {h['peer_ifname']} on {BRIDGE} for a QEMU guest ({st['vm']['acceleration']})")
            continue
        ns = h["name"]
        run([ip, "netns", "add", ns])
        run([ip, "link", "add", "name", h["peer_ifname"], "mtu", mtu, "type", "veth",
             "peer", "name", h["ifname"], "mtu", mtu, "netns", ns])
        _sysctl(None, f"net.ipv6.conf.{h['peer_ifname']}.disable_ipv6", "1")
        run([ip, "link", "set", "dev", h["peer_ifname"], "master", BRIDGE, "up"])
        for key_ in ("all", "default"):
            _sysctl(ns, f"net.ipv6.conf.{key_}.disable_ipv6", "1")
        run([ip, "-n", ns, "addr", "add", f"{h['address']}/{cfg['prefixlen']}", "dev", h["ifname"]])
        run([ip, "-n", ns, "link", "set", "dev", "lo", "up"])
        run([ip, "-n", ns, "link", "set", "dev", h["ifname"], "up"])
        say(f"  host {ns}: namespace, {h['ifname']} {h['address']}/{cfg['prefixlen']} <-> {h['peer_ifname']} "
            f"on {BRIDGE}")

    apply_link(cfg, say)
    if not PRIVSEP_DIR.is_dir():
        PRIVSEP_DIR.mkdir(mode=0o755)
        st["created_privsep_dir"] = True
        save_state(st)
    for h in cfg["hosts"]:
        start_sshd(st, h, say)
        if vmhost.is_vm(h):
            continue
        say(f"  host {h['name']}: sshd on {h['address']}:{SSHD_PORT} (key-only)"
            + (f", pinned to CPUs {cfg['cpus'][h['name']]}" if cfg["cpus"] else ""))
    write_known_hosts(cfg)
    save_state(st)
    return st


def _sysctl(ns, key, value):
    argv = [tool("sysctl"), "-q", "-w", f"{key}={value}"]
    (ns_run(ns, argv, check=False) if ns else run(argv, check=False))


def apply_link(cfg, say=print):
    """Make the link settings (rate, MTU, loss) what cfg says; safe to repeat."""
    ip, tc = tool("ip"), tool("tc")
    link = cfg["link"]
    mtu = str(link["mtu"])
    for h in cfg["hosts"]:
        if vmhost.is_vm(h):
            # The guest's own side: set at boot (its kernel command line), over SSH once it runs.
            if tcp_reachable(h["address"], timeout=0.5):
                vmhost.guest_ssh(ssh_argv(cfg), h, f"ip link set dev {h['ifname']} mtu {mtu}")
        else:
            run([ip, "-n", h["name"], "link", "set", "dev", h["ifname"], "mtu", mtu])
        run([ip, "link", "set", "dev", h["peer_ifname"], "mtu", mtu])
    run([ip, "link", "set", "dev", BRIDGE, "mtu", mtu])
    rate = link["rate_bit"]
    for h in cfg["hosts"]:
        dev = ["dev", h["ifname"]]
        if vmhost.is_vm(h):
            continue
        if rate:
            # A bucket of one full frame (or 1 ms of tokens at high rates), so
            # that even one multi-fragment message is paced at the link rate.
            burst = max(int(mtu) + 18, rate // 8 // 1000)
            run([tc, "-n", h["name"], "qdisc", "replace"] + dev +
                ["root", "tbf", "rate", f"{rate}bit", "burst", str(burst), "latency", "200ms"])
        else:
            run([tc, "-n", h["name"], "qdisc", "del"] + dev + ["root"], check=False)
    loss = link["loss_percent"]
    if loss > 0:
        ports = ", ".join(f'"{h["peer_ifname"]}"' for h in cfg["hosts"])
        per10k = max(1, round(loss * 100))
        ruleset = (f"table {NFT_FAMILY} {NFT_TABLE}\n"
                   f"delete table {NFT_FAMILY} {NFT_TABLE}\n"
                   f"table {NFT_FAMILY} {NFT_TABLE} {{\n"
                   f"  chain forward {{\n"
                   f"    type filter hook forward priority 0; policy accept;\n"
                   f"    iifname {{ {ports} }} oifname {{ {ports} }} numgen random mod 10000 < {per10k} counter drop\n"
                   f"  }}\n}}\n")
        run([tool("nft"), "-f", "-"], input=ruleset)
    elif nft_table_exists():
        run([tool("nft"), "delete", "table", NFT_FAMILY, NFT_TABLE])
    say(f"  link: rate {fmt_rate(rate)}, MTU {mtu}, loss {loss:g}%")


def sshd_config(cfg, h):
    d = host_dir(h["name"])
    return f"""# Generated by `rpcscope testbed up` for host {h['name']}; removed by `rpcscope testbed down`.
ListenAddress {h['address']}:{SSHD_PORT}
HostKey {d}/ssh_host_ed25519_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {STATE_DIR}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
HostbasedAuthentication no
UsePAM no
UseDNS no
X11Forwarding no
AllowAgentForwarding no
AllowTcpForwarding no
PermitTunnel no
PrintMotd no
MaxStartups 50:30:100
MaxSessions 50
ClientAliveInterval 30
Subsystem sftp {SFTP_SERVER}
# A module's temporary files (Ansible's AnsiballZ payload, anything else that honours TMPDIR) go under
# this host's own directory: a module killed mid-run (a deploy stopped, the host torn down) cannot
# leave them in the machine's /tmp, which the namespace hosts share; `testbed down` removes them.
# SHLVL=1: every command Ansible sends runs through root's login shell, and bash started by sshd reads
# ~/.bashrc unless it is nested (bash's shell.c, run_startup_files). The namespace hosts share the
# machine's home; a .bashrc that runs `pyenv rehash` takes a lock file there, a deploy stopped mid-command
# leaves it, and every later command of every deploy then waits its 60 s timeout. The testbed's
# commands need nothing from a user's shell start-up.
SetEnv TMPDIR={d}/tmp SHLVL=1
"""


def start_sshd(cfg, h, say=print):
    d = host_dir(h["name"])
    d.mkdir(parents=True, exist_ok=True)
    (d / "tmp").mkdir(mode=0o700, exist_ok=True)
    hk = d / "ssh_host_ed25519_key"
    if not hk.exists():
        run([tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", f"root@{h['name']}", "-f", str(hk)])
    conf = d / "sshd_config"
    conf.write_text(sshd_config(cfg, h))
    sshd = tool("sshd")
    run([sshd, "-t", "-f", str(conf)])
    if vmhost.is_vm(h):
        shutil.copy(STATE_DIR / "authorized_keys", d / "authorized_keys")
        return vmhost.boot(cfg, h, d, run, _ns_tcp_reachable, say)
    (d / "sshd.pid").unlink(missing_ok=True)
    inner = f"hostname {h['name']} && exec {sshd} -f {conf} -E {d / 'sshd.log'}"
    argv = [tool("ip"), "netns", "exec", h["name"]]
    if cfg["cpus"]:
        argv += [tool("taskset"), "-c", cfg["cpus"][h["name"]]]
    argv += [tool("unshare"), "--uts", "sh", "-c", inner]
    run(argv)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sshd_pid(h["name"]) and _ns_tcp_reachable(h):
            return
        time.sleep(0.05)
    log = (d / "sshd.log").read_text()[-500:] if (d / "sshd.log").exists() else ""
    raise UserError(f"sshd of {h['name']} did not start listening on {h['address']}:{SSHD_PORT} within 10s. {log}")


def _ns_tcp_reachable(h):
    return tcp_reachable(h["address"], SSHD_PORT, timeout=0.5)


def write_known_hosts(cfg):
    lines = []
    for h in cfg["hosts"]:
        pub = (host_dir(h["name"]) / "ssh_host_ed25519_key.pub").read_text().split()
        lines.append(f"{h['address']} {pub[0]} {pub[1]}")
    (STATE_DIR / "known_hosts").write_text("\n".join(lines) + "\n")


def ssh_argv(st):
    return [tool("ssh"), "-F", "/dev/null", "-i", f"{STATE_DIR}/id_ed25519", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={STATE_DIR}/known_hosts", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            "-o", "ControlMaster=no", "-o", "ControlPath=none"]


def ssh_check(st, h):
    """Log in as the control node would (key, known host key) and read the host's hostname."""
    p = run(ssh_argv(st) + [f"root@{h['address']}", "hostname"], check=False, timeout=15)
    return p.stdout.strip() if p.returncode == 0 else None


def write_inventory(st):
    import yaml  # ansible-core's dependency, installed in the project venv
    common = " ".join([
        f"-o UserKnownHostsFile={STATE_DIR}/known_hosts", "-o GlobalKnownHostsFile=/dev/null",
        "-o StrictHostKeyChecking=yes", "-o IdentitiesOnly=yes",
        # A per-testbed ControlPath: a master connection never outlives the testbed's sshd.
        f"-o ControlPath={STATE_DIR}/cp/%C",
    ])
    groups = {"rpc_clients": {"hosts": {}}, "rpc_servers": {"hosts": {}}}
    for h in st["hosts"]:
        groups["rpc_clients" if h["role"] == "client" else "rpc_servers"]["hosts"][h["name"]] = {
            "ansible_host": h["address"],
            "rpcscope_data_address": h["address"],
            "rpcscope_data_ifname": h["ifname"],
            # The hosts share this machine's filesystem: a prefix per host keeps
            # copy semantics honest (each host gets its own copy, as real ones do).
            "rpc_prefix": f"/opt/rpcscope/{h['name']}",
            # Ansible's remote temporary directories (default ~/.ansible/tmp, which the hosts share with
            # this machine) in the host's own, which `testbed down` removes: one left by a module
            # killed mid-task goes with the testbed (sshd_config's TMPDIR does the same for payloads).
            "ansible_remote_tmp": f"{host_dir(h['name'])}/tmp",
            # The kernel collector `rpcscope capture --inventory ... --kernel auto` runs on this host.
            "rpcscope_kernel_collector": "perf",
        }
        if vmhost.is_vm(h):
            groups["rpc_clients" if h["role"] == "client" else "rpc_servers"]["hosts"][h["name"]].update(
                vmhost.INVENTORY_VARS)
    inv = {"all": {
        "vars": {
            "ansible_user": "root",
            "ansible_port": SSHD_PORT,
            "ansible_ssh_private_key_file": f"{STATE_DIR}/id_ed25519",
            "ansible_ssh_common_args": common,
            "ansible_python_interpreter": "/usr/bin/python3",
            "rpcscope_testbed": "local",
            "rpcscope_link_rate": fmt_rate(st["link"]["rate_bit"]),
            "rpcscope_link_mtu": st["link"]["mtu"],
            "rpcscope_link_loss_percent": st["link"]["loss_percent"],
        },
        "children": groups,
    }}
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Generated by `rpcscope testbed up`; `rpcscope testbed down` removes it. Do not edit.\n"
            + yaml.safe_dump(inv, sort_keys=False, default_flow_style=False))
    if not INVENTORY.exists() or INVENTORY.read_text() != text:
        INVENTORY.write_text(text)


# ---------------------------------------------------------------- commands

def cmd_up(args):
    require_root()
    refuse_while_a_test_holds_it("up")
    cfg = make_config(args)
    require_capabilities(cfg)
    if any(vmhost.is_vm(h) for h in cfg["hosts"]):
        vmhost.require_tools()
        vmhost.artifacts()
    with exclusive():
        return _up(args, cfg)


def _up(args, cfg):
    quiet = args.json
    lines = []
    say = (lambda s: lines.append(s)) if quiet else print
    old = load_state()
    same_topology = old and all(old.get(k) == cfg[k] for k in ("subnet", "control_address", "hosts"))
    action = "created"
    if old and same_topology and not health(old):
        action = "unchanged"
        st = old
        if old["link"] != cfg["link"]:
            apply_link(cfg, say)
            st["link"] = cfg["link"]
            action = "reconfigured"
        if old.get("cpus") != cfg["cpus"]:
            st["cpus"] = cfg["cpus"]
            for h in st["hosts"]:
                pid = sshd_pid(h["name"])
                if pid:
                    _stop_pids([pid])
                start_sshd(st, h)
            action = "reconfigured"
        save_state(st)
        if action == "unchanged":
            say("  testbed already up with these settings; nothing to do")
    else:
        leftovers = _leftovers(old)
        if old or leftovers:
            why = "; ".join(health(old)) if old and same_topology else (
                "different hosts or subnet requested" if old else "leftovers " + ", ".join(leftovers))
            say(f"  cleaning stale testbed state ({why})")
            teardown(old, say=say)
            action = "rebuilt"
        check_address_clash(cfg, ours_present=False)
        try:
            st = build(cfg, say)
        except (UserError, OSError) as e:
            teardown(load_state() or cfg, say=lambda s: None)
            raise UserError(f"building the testbed failed: {e}. Everything built so far was removed.") from None
        except BaseException:
            teardown(load_state() or cfg, say=lambda s: None)
            raise
    write_inventory(st)
    logins = {}
    for h in st["hosts"]:
        logins[h["name"]] = ssh_check(st, h)
        if logins[h["name"]] != h["name"]:
            raise UserError(f"the testbed is built but SSH to {h['name']} ({h['address']}) failed; "
                            f"see {host_dir(h['name'])}/sshd.log, or run `rpcscope testbed down` and `up` again")
    if args.json:
        emit_json({"action": action, "state": st, "inventory": str(INVENTORY), "log": lines})
        return 0
    print(f"testbed {action}: {', '.join(h['name'] for h in st['hosts'])}; SSH as root works with "
          f"{STATE_DIR}/id_ed25519")
    print(f"inventory: {INVENTORY.relative_to(ROOT)}  (next: rpcscope deploy)")
    return 0


def _leftovers(old):
    found = []
    names = {DEFAULT_CLIENT, DEFAULT_SERVER} | ({h["name"] for h in old["hosts"]} if old else set())
    found += [f"namespace {n}" for n in netns_list() if n in names]
    if link_exists(BRIDGE):
        found.append(f"bridge {BRIDGE}")
    for ifn in ("rpcs-c0-br", "rpcs-s0-br"):
        if link_exists(ifn):
            found.append(f"veth {ifn}")
    if nft_table_exists():
        found.append(f"nft table {NFT_TABLE}")
    found += [f"QEMU guest (pid {p})" for p in vmhost.stray_qemus(STATE_DIR)]
    return found


def cmd_down(args):
    require_root()
    refuse_while_a_test_holds_it("down")
    with exclusive(remove_after=True):
        return _down(args)


def _down(args):
    st = load_state()
    lines = []
    say = (lambda s: lines.append(s)) if args.json else print
    # A killed capture's tracefs instances, LTTng sessions and perf outlive the namespaces: removed
    # first, by what it recorded and what rpcscope recognises as its own (collectors/leftovers.py).
    gone = leftovers.clean()
    for line in gone:
        say(f"  removed {line} (left by a killed capture)")
    removed = gone + teardown(st, say=say)
    if args.json:
        emit_json({"removed": removed})
    elif removed:
        print(f"testbed down: removed {len(removed)} item(s); nothing of the testbed is left")
    else:
        print("testbed down: nothing to remove (no testbed was up)")
    return 0


def collect_status(st):
    nss = set(netns_list())
    rows = []
    for h in st["hosts"]:
        if vmhost.is_vm(h):
            qpid = vmhost.qemu_pid(host_dir(h["name"]))
            rows.append({"host": h["name"], "role": h["role"], "address": h["address"],
                         "kind": vmhost.kind_label(h, st), "namespace": "-",
                         "sshd": f"in guest (qemu {qpid})" if qpid else "DOWN", "qdisc": "-",
                         "cpus": st.get("cpus", {}).get(h["name"], "any"),
                         "ssh": "ok" if qpid and tcp_reachable(h["address"]) else "UNREACHABLE"})
            continue
        up = h["name"] in nss
        pid = sshd_pid(h["name"])
        qdisc = "-"
        if up:
            p = run([tool("tc"), "-n", h["name"], "-j", "qdisc", "show", "dev", h["ifname"]], check=False)
            try:
                q = json.loads(p.stdout or "[]")
                qdisc = ",".join(x["kind"] for x in q if x.get("root")) or "-"
            except ValueError:
                pass
        rows.append({"host": h["name"], "role": h["role"], "address": h["address"], "kind": "netns",
                     "namespace": "yes" if up else "MISSING", "sshd": pid or "DOWN",
                     "qdisc": qdisc, "cpus": st.get("cpus", {}).get(h["name"], "any"),
                     "ssh": "ok" if up and pid and tcp_reachable(h["address"]) else "UNREACHABLE"})
    # Host to host, across the link: the client connects to the server's sshd.
    c, s = st["hosts"][0], st["hosts"][1]
    h2h = False
    code = (f"import socket;socket.create_connection(('{s['address']}',{SSHD_PORT}),timeout=2).close()")
    if vmhost.is_vm(c):
        h2h = vmhost.guest_ssh(ssh_argv(st), c, f'/usr/bin/python3 -c "{code}"').returncode == 0
    elif c["name"] in nss:
        h2h = ns_run(c["name"], ["/usr/bin/python3", "-c", code], check=False, timeout=10).returncode == 0
    return rows, h2h


def cmd_status(args):
    st = load_state()
    if not st:
        if args.json:
            emit_json({"up": False})
        else:
            print("testbed: down (no state in %s); start it with `rpcscope testbed up`" % STATE_DIR)
        return 1
    if os.geteuid() != 0:
        raise UserError("status inspects network namespaces, which needs root; run it as root")
    problems = health(st)
    rows, h2h = collect_status(st)
    link = st["link"]
    if args.json:
        emit_json({"up": True, "healthy": not problems, "problems": problems, "hosts": rows,
                   "control_address": st["control_address"], "subnet": st["subnet"], "bridge": st["bridge"],
                   "link": {"rate": fmt_rate(link["rate_bit"]), **link}, "host_to_host": h2h,
                   "inventory": str(INVENTORY), "state_dir": str(STATE_DIR)})
        return 0 if not problems else 1
    print(f"testbed: {'up' if not problems else 'DEGRADED'}  subnet {st['subnet']}  "
          f"control node {st['control_address']} on {st['bridge']}")
    table(rows, ["host", "role", "kind", "address", "namespace", "sshd", "ssh", "qdisc", "cpus"])
    print(f"link: rate {fmt_rate(link['rate_bit'])}, MTU {link['mtu']}, loss {link['loss_percent']:g}%; "
          f"client -> server: {'reachable' if h2h else 'UNREACHABLE'}")
    for p in problems:
        print(f"problem: {p} (run `rpcscope testbed up` to repair)")
    return 0 if not problems else 1


def register(subparsers):
    ap = subparsers.add_parser(
        "testbed", help="two-host testbed: network namespaces, a bridge, sshd per host",
        description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="testbed_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="create (or repair, or reconfigure) the testbed; idempotent",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--link-rate", metavar="RATE", default=None,
                    help="shape both directions with tc tbf, e.g. 10mbit (the papers' Ethernet), 1gbit; "
                         "default: unshaped")
    up.add_argument("--mtu", type=int, default=1500, help="MTU of the link (default 1500)")
    up.add_argument("--loss", type=float, default=0.0, metavar="PERCENT",
                    help="drop this percentage of frames between the hosts (nftables numgen random)")
    up.add_argument("--cpus", metavar="C[:S]", default=None,
                    help="pin each host's processes: one CPU list for both, or client:server, e.g. 0:1")
    up.add_argument("--client", default=DEFAULT_CLIENT,
                    help=f"client host name (default {DEFAULT_CLIENT}); vm: a QEMU guest with its own kernel (make vm)")
    up.add_argument("--server", default=DEFAULT_SERVER,
                    help=f"server host name (default {DEFAULT_SERVER}); vm: a QEMU guest with its own kernel (make vm)")
    up.add_argument("--subnet", default=DEFAULT_SUBNET,
                    help=f"subnet inside {BENCH_NET}; .1 is the control node (default {DEFAULT_SUBNET})")
    up.add_argument("--json", action="store_true", help="print the testbed's state as JSON")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="remove every namespace, link, bridge, rule and process the testbed made",
                          epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    down.add_argument("--json", action="store_true", help="list what was removed as JSON")
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="hosts, addresses, link settings and reachability",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)
    return ap
