"""LTTng command lines: the user-space session of a capture, and LTTng's kernel tracer.

Every function that builds a command returns argv lists and runs nothing, so
the command lines can be unit-tested (the kernel ones cannot run on machines
without lttng-modules, such as this project's CI VM). `run_lttng` runs them.
The command lines follow LTTng 2.13's documented interface (lttng-create(1),
lttng-enable-channel(1), lttng-enable-event(1), lttng-add-context(1),
lttng-track(1), lttng-list(1) --mi xml).
"""
import ctypes
import glob
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET

from rpcscope.output import UserError
from rpcscope.tracepoints import NET_RX_VECTOR, kernel_filter, lttng_kernel_names

PROVIDER = "rpcscope"
UST_CHANNEL = "rpcs_ust"
KERNEL_CHANNEL = "rpcs_kernel"
# Contexts every user event carries: which process and thread on which host.
UST_CONTEXTS = ("vpid", "vtid", "procname")
KERNEL_CONTEXTS = ("pid", "tid", "procname")
CMD_TIMEOUT = 30

# Bytes one user event takes in the ring buffer, roughly: the compact event
# header, the payload (call id, up to two 32-bit fields) and the contexts
# (vpid, vtid, procname[17]), rounded up generously.
UST_EVENT_BYTES = 72
# User events per call and side: the catalog has ~26 marks a side, some per
# fragment. The estimate errs on the large side so that nothing is discarded.
UST_EVENTS_PER_CALL = 80
UST_EVENTS_PER_FRAGMENT = 16
MIN_SUBBUF = 256 << 10
MAX_SUBBUF = 32 << 20
NUM_SUBBUF = 8


def _pow2_at_least(n):
    p = 1
    while p < n:
        p <<= 1
    return p


def ust_buffer_size(calls, fragments=1):
    """(subbuf_size, num_subbuf) for one CPU's ring buffer: room for every event of `calls` calls
    (both sides may run on one CPU), so that even a consumer daemon that never gets the CPU
    during the run discards nothing (up to 8 x 32 MiB a CPU)."""
    per_call = 2 * (UST_EVENTS_PER_CALL + UST_EVENTS_PER_FRAGMENT * max(0, fragments - 1))
    total = int(calls * per_call * UST_EVENT_BYTES * 1.5)
    sub = min(MAX_SUBBUF, max(MIN_SUBBUF, _pow2_at_least(-(-total // NUM_SUBBUF))))
    return sub, NUM_SUBBUF


def ust_session_commands(session, output, subbuf_size, num_subbuf, vpids=()):
    """The commands that create a user-space session recording the rpc provider.

    Per-UID buffers (both hosts' processes run as root), discard mode (a full
    buffer discards and counts, never blocks the application), the monotonic
    clock LTTng-UST always uses. With vpids, only those processes are recorded
    (lttng track): other traced programs on the machine stay out of the trace.
    """
    s = f"--session={session}"
    cmds = [
        ["create", session, f"--output={output}"],
        ["enable-channel", "--userspace", s, "--buffers-uid", "--discard",
         f"--subbuf-size={subbuf_size}", f"--num-subbuf={num_subbuf}", UST_CHANNEL],
        ["enable-event", "--userspace", s, f"--channel={UST_CHANNEL}", f"{PROVIDER}:*"],
        ["add-context", "--userspace", s, f"--channel={UST_CHANNEL}"]
        + [a for c in UST_CONTEXTS for a in ("--type", c)],
    ]
    if vpids:
        cmds.append(ust_track_command(session, vpids))
    return cmds


def ust_track_command(session, vpids):
    return ["track", "--userspace", f"--session={session}", "--vpid=" + ",".join(str(p) for p in vpids)]


# ---------------------------------------------------------------- LTTng's kernel tracer

# perf/tracefs name -> LTTng kernel tracer name (lttng-modules spells most of them without the
# subsystem; syscalls are enabled with --syscall), from the step catalog (steps.toml [kernel_events]).
LTTNG_KERNEL_NAMES = lttng_kernel_names()


def _procname_filter(names, field="$ctx.procname"):
    return " || ".join(f'{field} == "{n}"' for n in names)


def lttng_kernel_commands(session, output, events, syscalls, devices, procnames,
                          subbuf_size=4 << 20, num_subbuf=8):
    """The commands that record the kernel side with LTTng's kernel tracer (lttng-modules).

    events: perf-style names ("net:net_dev_xmit", ...), translated to LTTng's;
    qdisc events have no lttng-modules probe and are skipped. syscalls: names
    without prefix ("sendto"), recorded as syscall_entry_* / syscall_exit_*.
    The filters keep the volume small as the perf collector's do: syscalls
    and copies by the process name (a context), the scheduler by the names of
    the threads switched or woken, the network by device, softirqs NET_RX only.
    """
    s = f"--session={session}"
    ch = f"--channel={KERNEL_CHANNEL}"
    cmds = [
        ["create", session, f"--output={output}"],
        ["enable-channel", "--kernel", s, "--discard", f"--subbuf-size={subbuf_size}",
         f"--num-subbuf={num_subbuf}", KERNEL_CHANNEL],
        ["add-context", "--kernel", s, ch] + [a for c in KERNEL_CONTEXTS for a in ("--type", c)],
    ]
    if syscalls:
        cmds.append(["enable-event", "--kernel", s, ch, "--syscall", ",".join(syscalls),
                     f"--filter={_procname_filter(procnames)}"])
    groups = {}
    for ev in events:
        name = LTTNG_KERNEL_NAMES.get(ev)
        if not name:
            continue
        kind = kernel_filter(ev)           # what the catalog says the collectors keep of it
        if kind == "switch":
            flt = " || ".join([_procname_filter(procnames, "prev_comm"), _procname_filter(procnames, "next_comm")])
        elif kind == "woken":
            flt = _procname_filter(procnames, "comm")
        elif kind == "device":
            flt = " || ".join(f'name == "{d}"' for d in devices)
        elif kind == "net_rx":
            flt = f"vec == {NET_RX_VECTOR}"
        else:
            flt = _procname_filter(procnames)
        groups.setdefault(flt, []).append(name)
    for flt, names in groups.items():
        cmds.append(["enable-event", "--kernel", s, ch, ",".join(names), f"--filter={flt}"])
    return cmds


# ---------------------------------------------------------------- running lttng

def lttng_path():
    p = shutil.which("lttng")
    if not p:
        raise UserError("'lttng' was not found; install lttng-tools (make bootstrap does)")
    return p


def run_lttng(args, check=True, timeout=CMD_TIMEOUT):
    try:
        p = subprocess.run([lttng_path()] + list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"lttng {' '.join(args)} timed out after {timeout}s; is lttng-sessiond stuck?") from None
    if check and p.returncode != 0:
        err = (p.stderr or p.stdout).strip().splitlines()
        raise UserError(f"lttng {' '.join(args)} failed: {err[-1] if err else 'exit %d' % p.returncode}")
    return p


def _ctl():
    """liblttng-ctl (lttng/lttng.h), for lttng_data_pending: the CLI polls it every 200 ms."""
    try:
        lib = ctypes.CDLL("liblttng-ctl.so.0")
        lib.lttng_data_pending.argtypes = [ctypes.c_char_p]
        return lib
    except (OSError, AttributeError):
        return None


def stop_session(name, timeout=CMD_TIMEOUT):
    """`lttng stop NAME`, returning as soon as every event recorded is on disk (lttng_data_pending
    polled every 5 ms instead of the CLI's 200 ms)."""
    lib = _ctl()
    if lib is None:
        run_lttng(["stop", name])
        return
    run_lttng(["stop", "--no-wait", name])
    deadline = time.monotonic() + timeout
    while True:
        pending = lib.lttng_data_pending(name.encode())
        if pending == 0:
            return
        if pending < 0:
            raise UserError(f"lttng: cannot tell whether session {name}'s data is on disk "
                            f"(lttng_data_pending: {pending}); is lttng-sessiond still running?")
        if time.monotonic() > deadline:
            raise UserError(f"lttng: session {name}'s data still not on disk {timeout} s after it was stopped")
        time.sleep(0.005)


def wait_files_closed(path, timeout=10.0):
    """Wait until no process holds a file under path open (the consumer daemon closing a destroyed
    session's trace): the trace is then complete on disk. Raises UserError after timeout seconds."""
    root = os.path.realpath(path) + os.sep
    deadline = time.monotonic() + timeout
    while True:
        held = []
        for fd in glob.glob("/proc/[0-9]*/fd/*"):
            try:
                if os.readlink(fd).startswith(root):
                    held.append(fd.split("/")[2])
            except OSError:
                continue                            # the process or descriptor went away meanwhile
        if not held:
            return
        if time.monotonic() > deadline:
            raise UserError(f"{path}: still open in process(es) {', '.join(sorted(set(held)))} {timeout:.0f} s "
                            f"after its LTTng session was destroyed; the trace may be incomplete (check "
                            f"`lttng list` and the lttng-consumerd processes, then capture again)")
        time.sleep(0.005)


def session_names():
    p = run_lttng(["--mi", "xml", "list"], check=False)
    if p.returncode != 0:
        return []
    try:
        root = ET.fromstring(p.stdout)
    except ET.ParseError:
        return []
    return [e.text for e in root.iter() if _tag(e) == "name" and _tag_parent_is_session(root, e)]


def _tag(e):
    return e.tag.rsplit("}", 1)[-1]


def _tag_parent_is_session(root, el):
    for parent in root.iter():
        if _tag(parent) == "session" and el in list(parent):
            return True
    return False


def channel_stats(session):
    """{channel: {"discarded_events": n, "lost_packets": n}} from `lttng --mi xml list SESSION`."""
    p = run_lttng(["--mi", "xml", "list", session])
    root = ET.fromstring(p.stdout)
    out = {}
    for chan in root.iter():
        if _tag(chan) != "channel":
            continue
        name = next((c.text for c in chan if _tag(c) == "name"), None)
        stats = {}
        for e in chan.iter():
            t = _tag(e)
            if t in ("discarded_events", "lost_packets") and e.text and e.text.strip().isdigit():
                stats[t] = int(e.text)
        if name:
            out[name] = {"discarded_events": stats.get("discarded_events", 0),
                         "lost_packets": stats.get("lost_packets", 0)}
    return out


def version():
    p = subprocess.run([lttng_path(), "--version"], capture_output=True, text=True, timeout=10)
    m = re.search(r"(\d+\.\d+\.\d+)", p.stdout)
    return m.group(1) if m else p.stdout.strip()
