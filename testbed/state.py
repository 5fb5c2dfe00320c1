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


def _parts(st):
    """Every part of a recorded testbed, as (its name where it exists, what is said where it is missing, whether
    it exists, whether its absence is a problem of its own): the bridge; each host's namespace, link and sshd
    (a missing namespace takes its link and sshd with it, so only the namespace is said missing), or its
    QEMU and tap."""
    nss = set(netns_list())
    yield f"bridge {st['bridge']}", f"bridge {st['bridge']} is missing", link_exists(st["bridge"]), True
    for h in st["hosts"]:
        name, peer = h["name"], h["peer_ifname"]
        if vmhost.is_vm(h):
            yield (f"the QEMU of {name}", f"the QEMU of VM host {name} is not running",
                   bool(vmhost.qemu_pid(host_dir(name))), True)
            yield f"link {peer}", f"tap {peer} of VM host {name} is missing", link_exists(peer), True
            continue
        ns = name in nss
        yield f"namespace {name}", f"namespace {name} is missing", ns, True
        yield f"link {peer}", f"link {peer} is missing", link_exists(peer), ns
        yield f"sshd of {name}", f"sshd of {name} is not running", bool(sshd_pid(name)), ns


def health(st):
    """What is wrong with a recorded testbed ([] when healthy)."""
    problems = [missing for _, missing, there, counts in _parts(st) if counts and not there]
    if st["link"].get("loss_percent") and not nft_table_exists():
        problems.append(f"nft table {NFT_FAMILY} {NFT_TABLE} is missing")
    return problems


def remains(st):
    """What of a recorded testbed still exists on this machine: its bridge, its hosts' namespaces, links,
    sshds and QEMUs. [] when the record outlived every part of it (the machine restarted under it, or the
    record was copied to a machine without them): a record that `rpcscope testbed down` only clears."""
    return [name for name, _, there, _ in _parts(st) if there]
