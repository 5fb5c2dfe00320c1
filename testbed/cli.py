"""`rpcscope testbed up | down | status`: a two-host testbed on one machine.

testbed/README.md describes the testbed; the modules beside this one build it (hosts, sshd, link),
record it (state), write its inventory and show its status.
"""
import argparse

from rpcscope import ROOT
from rpcscope.collectors import leftovers
from rpcscope.output import UserError, emit_json

from . import vmhost
from .checks import check_address_clash, require_capabilities, require_root
from .config import BENCH_NET, DEFAULT_CLIENT, DEFAULT_SERVER, DEFAULT_SUBNET, INVENTORY, STATE_DIR, make_config
from .hosts import build, stale_items, stop_pids, teardown
from .inventory import write_inventory
from .link import apply_link
from .lock import exclusive, refuse_while_a_test_holds_it
from .sshd import ssh_check, start_sshd
from .state import health, host_dir, load_state, save_state, sshd_pid
from .status import cmd_status

EPILOG = """examples:
  rpcscope testbed up                              two hosts, unshaped veth link
  rpcscope testbed up --link-rate 10mbit           the papers' 10 Mbit/s Ethernet
  rpcscope testbed up --mtu 9000 --loss 0.5        jumbo frames, 0.5% frame loss
  rpcscope testbed up --cpus 0:1                   client on CPU 0, server on CPU 1
  rpcscope testbed status --json                   hosts, addresses, link, reachability
  rpcscope testbed down                            remove everything `up` made

Then: rpcscope deploy; cd ansible && ansible-playbook -i inventories/local smoke.yml
"""


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
                    stop_pids([pid])
                start_sshd(st, h)
            action = "reconfigured"
        save_state(st)
        if action == "unchanged":
            say("  testbed already up with these settings; nothing to do")
    else:
        stale = stale_items(old)
        if old or stale:
            why = "; ".join(health(old)) if old and same_topology else (
                "different hosts or subnet requested" if old else "leftovers " + ", ".join(stale))
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
