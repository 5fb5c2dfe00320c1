"""A testbed host that is a QEMU guest with its own kernel (`rpcscope testbed up --server vm`).

The guest boots Debian's kernel that `make vm` unpacked into its store (pinned in testbed/vm/vm.mk;
build/vm/vm.json points to it), with a busybox initramfs that mounts this machine's / read-only over virtio-9p
under a tmpfs overlay (testbed/vm/initramfs-init) and binds the kernel's modules, lttng-modules
among them, into it. The guest's init (testbed/vm/guest-init.sh) gives it its testbed address on
its virtio NIC and starts a key-only sshd from the configuration `testbed up` wrote into the host's
state directory. The NIC is a tap on the testbed bridge, named as the host's veth would be, so the
bridge, the loss rules and `down` treat it alike.

Acceleration: KVM where the CPU offers hardware virtualisation (vmx or svm in /proc/cpuinfo) and
/dev/kvm is not the paravirtual kvm-pvm, which runs only specially built guest kernels; QEMU's
software emulation (TCG) otherwise. A TCG guest runs many times slower than the host: good for
checking correctness across two kernels and two clocks, not for absolute timings.

Everything a guest makes lives in its host directory (qemu.pid, console.log) and its tap; `stop`
ends QEMU by its pid file, or by its command line naming the testbed's state directory.
"""
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

from rpcscope import ROOT
from rpcscope.output import UserError

VM_DIR = ROOT / "build" / "vm"
VM_JSON = VM_DIR / "vm.json"
GUEST_INIT = ROOT / "testbed" / "vm" / "guest-init.sh"
GUEST_IFNAME = "eth0"
MEMORY_MB = 1024
OVERLAY_SIZE = "512m"          # the guest's writable layer (deploy's files, traces): half its memory
# 9p's cache mode for this machine's / in the guest (testbed/vm/initramfs-init mounts it).
NINEP_CACHE = "mmap"
BOOT_TIMEOUT = 180             # seconds from QEMU's start to a reachable sshd (TCG on a loaded machine)
QEMU = "qemu-system-x86_64"
# Niceness of QEMU (RPCSCOPE_VM_NICE): 0 unless asked, so that a guest on a busy machine can be
# kept from others' timing runs.
NICE_ENV = "RPCSCOPE_VM_NICE"


@dataclasses.dataclass(frozen=True)
class Artifacts:
    """What `make vm` built (build/vm/vm.json)."""
    kernel: str                 # Debian package version, e.g. 6.1.176-1
    kernel_release: str         # uname -r in the guest
    vmlinuz: str
    initramfs: str
    modules: str                # the guest's /lib/modules/RELEASE, lttng-modules in updates/
    lttng_modules: str


def artifacts():
    """The VM artifacts, or a UserError naming `make vm`."""
    try:
        d = json.loads(VM_JSON.read_text())
        art = Artifacts(kernel=d["kernel"], kernel_release=d["kernel_release"], vmlinuz=d["vmlinuz"],
                        initramfs=d["initramfs"], modules=d["modules"], lttng_modules=d["lttng_modules"])
    except (OSError, ValueError, KeyError):
        raise UserError(f"a VM host needs the guest kernel, modules and initramfs under {VM_DIR}; "
                        f"run `make vm` first (it downloads Debian's kernel and builds lttng-modules for it)") from None
    for p in (art.vmlinuz, art.initramfs, art.modules):
        if not pathlib.Path(p).exists():
            raise UserError(f"{p} is missing; run `make vm` again")
    return art


def acceleration():
    """'kvm' where the CPU offers hardware virtualisation to a stock kernel, else 'tcg'."""
    if pathlib.Path("/sys/module/kvm_pvm").exists() or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    try:
        flags = set()
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        return "tcg"
    return "kvm" if flags & {"vmx", "svm"} else "tcg"


def require_tools():
    if not shutil.which(QEMU):
        raise UserError(f"{QEMU} was not found; install qemu-system-x86 (make bootstrap does)")


def is_vm(h):
    return h.get("kind") == "vm"


def _pidfile(hdir):
    return pathlib.Path(hdir) / "qemu.pid"


def qemu_pid(hdir):
    """The pid of the host's QEMU, when it runs."""
    try:
        pid = int(_pidfile(hdir).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _is_qemu(pid) else None


def _cmdline(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _is_qemu(pid, state_dir=None):
    argv = _cmdline(pid)
    if not argv or not argv[0].decode(errors="replace").endswith(QEMU):
        return False
    try:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    except OSError:
        return False
    return state_dir is None or any(f"rpcs_dir={state_dir}/".encode() in a for a in argv)


def stray_qemus(state_dir):
    """[pid] of QEMUs booted for this testbed (their command line names its state directory)."""
    out = []
    for p in pathlib.Path("/proc").iterdir():
        if p.name.isdigit() and _is_qemu(int(p.name), state_dir):
            out.append(int(p.name))
    return out


def _mac(address):
    a, b, c = (int(x) for x in address.split(".")[1:])
    return f"52:54:00:{a:02x}:{b:02x}:{c:02x}"


def boot_argv(cfg, h, hdir, art, accel):
    """QEMU's command line for the host h (its directory hdir holds sshd_config and the keys)."""
    tap = h["peer_ifname"]
    cmdline = " ".join([
        "console=ttyS0", "panic=-1", "quiet", f"rpcs_overlay_size={OVERLAY_SIZE}", f"rpcs_9p_cache={NINEP_CACHE}",
        f"rpcs_modules={art.modules}", f"rpcs_init={GUEST_INIT}", f"rpcs_dir={hdir}",
        f"rpcs_host={h['name']}", f"rpcs_ifname={GUEST_IFNAME}", f"rpcs_mtu={cfg['link']['mtu']}",
        f"rpcs_addr={h['address']}/{cfg['prefixlen']}",
    ])
    argv = []
    nice = os.environ.get(NICE_ENV, "").strip()
    if nice and nice != "0":
        argv += ["nice", "-n", nice]
    if cfg.get("cpus", {}).get(h["name"]):
        argv += ["taskset", "-c", cfg["cpus"][h["name"]]]
    argv += [shutil.which(QEMU) or QEMU, "-name", f"rpcscope-{h['name']}",
             "-accel", "kvm" if accel == "kvm" else "tcg,tb-size=256",
             "-cpu", "host" if accel == "kvm" else "max", "-m", str(MEMORY_MB), "-smp", "1",
             "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
             "-serial", f"file:{hdir}/console.log", "-daemonize", "-pidfile", str(_pidfile(hdir)),
             "-kernel", art.vmlinuz, "-initrd", art.initramfs, "-append", cmdline,
             "-fsdev", "local,id=hostroot,path=/,security_model=passthrough,readonly=on,multidevs=remap",
             "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
             "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
             "-device", f"virtio-net-pci,netdev=n0,mac={_mac(h['address'])}"]
    return argv


def add_tap(run, ip, h, bridge, mtu):
    """The guest's NIC on the host side: a tap on the testbed bridge."""
    tap = h["peer_ifname"]
    run([ip, "tuntap", "add", "dev", tap, "mode", "tap"])
    run([ip, "link", "set", "dev", tap, "mtu", str(mtu), "master", bridge, "up"])


def boot(cfg, h, hdir, run, reachable, say=print):
    """Boot the guest (its tap exists, hdir holds its sshd_config, keys and authorized_keys) and
    wait for its sshd. A guest that already runs is re-pinned to cfg's CPUs instead."""
    pid = qemu_pid(hdir)
    if pid:
        cpus = cfg.get("cpus", {}).get(h["name"])
        if cpus:
            run(["taskset", "-a", "-c", "-p", cpus, str(pid)])
        return
    art = artifacts()
    accel = acceleration()
    (pathlib.Path(hdir) / "console.log").unlink(missing_ok=True)
    t0 = time.monotonic()
    run(boot_argv(cfg, h, hdir, art, accel), timeout=60)
    deadline = t0 + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        if not qemu_pid(hdir):
            break
        if reachable(h):
            say(f"  host {h['name']}: QEMU guest ({accel}), kernel {art.kernel_release}, sshd on "
                f"{h['address']} after {time.monotonic() - t0:.1f}s")
            return
        time.sleep(0.5)
    tail = console_tail(hdir)
    raise UserError(f"the VM host {h['name']} did not bring its sshd up on {h['address']} within "
                    f"{BOOT_TIMEOUT}s ({'QEMU exited' if not qemu_pid(hdir) else 'still booting'}); its console "
                    f"ends: {tail}")


def console_tail(hdir, lines=3):
    try:
        text = (pathlib.Path(hdir) / "console.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no console output)"
    return " | ".join(text[-lines:]) or "(no console output)"


def stop(pids, grace=5.0, alive=None):
    """End processes by pid: SIGTERM, then SIGKILL to those still alive (alive(pid), by default: still a
    QEMU; QEMU exits at once on SIGTERM, the guest's state is all in memory)."""
    alive = alive or _is_qemu
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 3.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        if not any(alive(p) for p in pids):
            return


def kind_label(h, st):
    return f"vm {st.get('vm', {}).get('acceleration', '?')}" if is_vm(h) else "netns"


def guest_ssh(ssh_argv, h, command, timeout=30):
    """Run a command in the guest over SSH; CompletedProcess."""
    try:
        return subprocess.run(ssh_argv + [f"root@{h['address']}", command], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(ssh_argv, 255, "", f"ssh to {h['name']} timed out after {timeout}s")


# The inventory's variables for a VM host (inventory.write_inventory adds them to the host's own).
INVENTORY_VARS = {
    "rpcscope_host_kind": "vm",
    # `rpcscope capture --inventory ... --kernel auto`: LTTng's kernel tracer, whose modules `make vm`
    # built for the guest's kernel.
    "rpcscope_kernel_collector": "lttng",
    # Those modules come from `make vm`, bound into the guest's /lib/modules: no DKMS in the guest.
    "common_lttng_modules": "never",
    # A TCG guest compiles many times slower than this machine; it runs the control node's own
    # builds (it sees the same Debian userland), installed from this machine's / as the guest sees it:
    # one command in the guest, no copy over SSH.
    "rpc_install_method": "shared",
}
