"""`rpcscope testbed status`: each host's namespace, sshd, qdisc and SSH login, and the link between them."""
import json
import os

from rpcscope.output import UserError, emit_json, table
from rpcscope.units import fmt_rate

from . import vmhost
from .config import INVENTORY, SSHD_PORT, STATE_DIR
from .sshd import ssh_argv
from .state import health, host_dir, load_state, remains, sshd_pid
from .system import netns_list, ns_run, run, tcp_reachable, tool


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
        h2h = vmhost.guest_ssh(ssh_argv(), c, f'/usr/bin/python3 -c "{code}"').returncode == 0
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
    # A record none of whose parts exist: the machine restarted under it (or the record was copied).
    gone = bool(problems) and not remains(st)
    rows, h2h = collect_status(st)
    link = st["link"]
    if args.json:
        emit_json({"up": True, "healthy": not problems, "gone": gone, "problems": problems, "hosts": rows,
                   "control_address": st["control_address"], "subnet": st["subnet"], "bridge": st["bridge"],
                   "link": {"rate": fmt_rate(link["rate_bit"]), **link}, "host_to_host": h2h,
                   "inventory": str(INVENTORY), "state_dir": str(STATE_DIR)})
        return 0 if not problems else 1
    if gone:
        print(f"testbed: GONE: {STATE_DIR} records a testbed none of whose parts exist on this machine (it "
              f"restarted under them?); `rpcscope testbed up` brings it back, `rpcscope testbed down` clears the "
              f"record")
        return 1
    print(f"testbed: {'up' if not problems else 'DEGRADED'}  subnet {st['subnet']}  "
          f"control node {st['control_address']} on {st['bridge']}")
    table(rows, ["host", "role", "kind", "address", "namespace", "sshd", "ssh", "qdisc", "cpus"])
    print(f"link: rate {fmt_rate(link['rate_bit'])}, MTU {link['mtu']}, loss {link['loss_percent']:g}%; "
          f"client -> server: {'reachable' if h2h else 'UNREACHABLE'}")
    for p in problems:
        print(f"problem: {p} (run `rpcscope testbed up` to repair)")
    return 0 if not problems else 1
