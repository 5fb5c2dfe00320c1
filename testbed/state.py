"""What a testbed that is up recorded (its state file, its hosts' directories) and what is wrong with it."""
import json

from . import vmhost
from .config import NFT_FAMILY, NFT_TABLE, STATE_DIR
from .system import link_exists, netns_list, nft_table_exists, pid_alive, read_pid


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


def remains(st):
    """What of a recorded testbed still exists on this machine: its bridge, its hosts' namespaces, sshds,
    QEMUs and links. [] when the record outlived every part of it (the machine restarted under it, or the
    record was copied to a machine without them): a record that `rpcscope testbed down` only clears."""
    found = [f"bridge {st['bridge']}"] if link_exists(st["bridge"]) else []
    nss = set(netns_list())
    for h in st["hosts"]:
        if vmhost.is_vm(h):
            if vmhost.qemu_pid(host_dir(h["name"])):
                found.append(f"the QEMU of {h['name']}")
        else:
            if h["name"] in nss:
                found.append(f"namespace {h['name']}")
            if sshd_pid(h["name"]):
                found.append(f"sshd of {h['name']}")
        if link_exists(h["peer_ifname"]):
            found.append(f"link {h['peer_ifname']}")
    return found
