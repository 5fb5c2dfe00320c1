"""The link between the hosts as `testbed up` sets it: MTU, rate (tc tbf on each host's interface, so
both directions are shaped) and loss (an nftables bridge table that drops a share of the frames
forwarded between the hosts)."""
from rpcscope.units import fmt_rate

from . import vmhost
from .config import BRIDGE, NFT_FAMILY, NFT_TABLE
from .sshd import ssh_argv
from .system import nft_table_exists, run, tcp_reachable, tool


def apply_link(cfg, say=print):
    """Make the link settings (rate, MTU, loss) what cfg says; safe to repeat."""
    ip, tc = tool("ip"), tool("tc")
    link = cfg["link"]
    mtu = str(link["mtu"])
    for h in cfg["hosts"]:
        if vmhost.is_vm(h):
            # The guest's own side: set at boot (its kernel command line), over SSH once it runs.
            if tcp_reachable(h["address"], timeout=0.5):
                vmhost.guest_ssh(ssh_argv(), h, f"ip link set dev {h['ifname']} mtu {mtu}")
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
