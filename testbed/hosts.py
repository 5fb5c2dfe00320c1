"""The testbed's hosts built and removed: the bridge, a network namespace with a veth pair per host (or
a tap for a QEMU guest), their sshds; and everything of a testbed, or its leftovers, taken away."""
import datetime
import os
import pathlib
import shutil

from rpcscope import ROOT

from . import vmhost
from .config import (
    BRIDGE,
    DEFAULT_CLIENT,
    DEFAULT_SERVER,
    HOST_FILE_ROOTS,
    INVENTORY,
    NFT_FAMILY,
    NFT_TABLE,
    PRIVSEP_DIR,
    SSHD_PORT,
    STATE_DIR,
)
from .link import apply_link
from .sshd import start_sshd, write_known_hosts
from .state import host_dir, save_state
from .system import link_exists, netns_list, nft_table_exists, ns_run, pid_alive, read_pid, run, tool, tool_env


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
    if cp.is_dir() and shutil.which("ssh", path=tool_env()["PATH"]):
        for sock in sorted(cp.iterdir())[:100]:
            run([tool("ssh"), "-o", f"ControlPath={sock}", "-O", "exit", "testbed"], check=False, timeout=5)
            removed.append(f"ssh master connection {sock.name[:12]}")

    # 2. Every process in the testbed's namespaces: sshd, its sessions, whatever they started.
    present = [n for n in netns_list() if n in names]
    for ns in present:
        pids = _ns_pids(ns)
        if pids:
            stop_pids(pids)
            removed.append(f"{len(pids)} process(es) in {ns} (sshd and its sessions)")
    # sshd by pid file, in case a namespace went away under it.
    for n in names:
        pid = read_pid(host_dir(n) / "sshd.pid")
        if pid and pid_alive(pid) and _is_our_sshd(pid):
            stop_pids([pid])
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


def stop_pids(pids, grace=5.0):
    vmhost.stop(pids, grace, alive=pid_alive)


def stale_items(old):
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
