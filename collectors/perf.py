"""The perf kernel collector: a focused, filtered `perf record -a -k mono`, then CTF.

Why system-wide with filters rather than `perf record -p`: the switch into a
woken thread is recorded in the idle task's context and softirq work may run
in ksoftirqd, both of which `-p` misses (STEPS.md). Every event gets a filter
(process names, devices, NET_RX) so the volume stays near 20-60 events a call.
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

from rpcscope.output import UserError
from rpcscope.tracepoints import NET_RX_VECTOR, full_only_events, kernel_filter, kernel_group, syscalls_of

from . import leftovers

TRACEFS = pathlib.Path("/sys/kernel/tracing")
PROCNAMES = ("rpc-client", "rpc-server")

# Syscalls the reference RPC makes on its call path (send/receive/poll, and the
# listener-to-executor hand-off when the server has executors).
SYSCALLS = tuple(dict.fromkeys(syscalls_of("kernel_begin", "sendmsg") + syscalls_of("kernel_inside", "recv")
                               + syscalls_of("kernel_begin", "select")))
POOL_SYSCALLS = tuple(x for f in ("kernel_begin", "kernel_inside", "kernel_end") for x in syscalls_of(f)
                      if x not in SYSCALLS)
# The kernel events by group, as the step catalog names them (tracepoints/steps.toml [kernel_events]).
NET_EVENTS = kernel_group("net")
SCHED_EVENTS = kernel_group("sched")
SOFTIRQ_EVENTS = kernel_group("softirq")
COPY_EVENTS = kernel_group("copy")
QDISC_EVENTS = kernel_group("qdisc")
NET_RX_SOFTIRQ = NET_RX_VECTOR
# What `--kernel-events full` adds to the default "lean" set: the start of each device's transmit
# beside its hand-off, and the wake-up's second event (the analysis takes sched_waking, and
# sched_wakeup only from a kernel without it); the local testbed's capture then also records the
# packets on the bridge's side of each veth pair (capture.py devices). Why lean by default: every event
# recorded on the round-trip path lengthens the traced calls (~0.3 us each in situ on this VM), and
# the probe correction that takes that length off again is the model's largest error term. These add
# 9 kernel events to a UDP null call (29 -> 38 a call, 15 -> 24 on its path) and say nothing the
# analysis needs: the path goes from the sender's hand-off to the receiver's netif_receive_skb of the
# same skb either way (collectors/README.md, "The event set"). The catalog marks them lean = false.
FULL_ONLY_EVENTS = full_only_events()
KERNEL_EVENT_SETS = ("lean", "full")
# perf ring buffer per CPU, in pages: 16 MiB, so that a burst of ~150,000 events
# (a second of 8 KiB calls with both hosts on one CPU) does not overrun it.
MMAP_PAGES = 4096


def _or(parts):
    return " || ".join(parts)


def _names(field, names):
    return _or(f'{field} == "{n}"' for n in names)


def event_filter(event, procnames=PROCNAMES, devices=()):
    """The tracefs filter for one event (None: unfiltered), by what the catalog says the collectors keep
    of it (tracepoints.kernel_filter)."""
    kind = kernel_filter(event)
    if kind == "switch":
        return _or([_names("prev_comm", procnames), _names("next_comm", procnames)])
    if kind == "woken":
        return _names("comm", procnames)         # the woken thread's name
    if kind == "device":
        return _names("name", devices)
    if kind == "net_rx":
        return f"vec == {NET_RX_SOFTIRQ}"
    if kind == "none":
        return None                              # a shaped link's qdisc: low volume
    # syscalls and the copy to user: the current task's name
    return _names("comm", procnames)


def event_set(executors=0, shaped=False, available=None, detail="lean"):
    """The perf event names of a capture, in a stable order; missing tracepoints are left out.
    detail: "lean" (the default) or "full" (FULL_ONLY_EVENTS as well)."""
    if detail not in KERNEL_EVENT_SETS:
        raise ValueError(f"kernel event set {detail!r}: use one of {', '.join(KERNEL_EVENT_SETS)}")
    sys_ = list(SYSCALLS) + (list(POOL_SYSCALLS) if executors else [])
    evs = [f"syscalls:sys_{d}_{s}" for s in sys_ for d in ("enter", "exit")]
    evs += list(NET_EVENTS) + list(SOFTIRQ_EVENTS) + list(SCHED_EVENTS) + list(COPY_EVENTS)
    if detail == "lean":
        evs = [e for e in evs if e not in FULL_ONLY_EVENTS]
    if shaped:
        evs += list(QDISC_EVENTS)
    if available is not None:
        evs = [e for e in evs if e in available]
    return evs


def tracepoint_available(event):
    sub, name = event.split(":", 1)
    return (TRACEFS / "events" / sub / name).is_dir()


def record_argv(output, events, devices, procnames=PROCNAMES, mmap_pages=MMAP_PAGES, control=None,
                switch_output=False):
    """perf record, system-wide, CLOCK_MONOTONIC (`-k mono`, LTTng-UST's clock), one filter per event.
    control: (ctl_fifo, ack_fifo): start disabled and wait for 'enable' on the control fifo.
    switch_output: on SIGUSR2 write what was recorded so far to a file of its own and go on."""
    # --mmap-flush at its maximum (a quarter of the ring): perf leaves the ring alone until that
    # much has gathered instead of copying out every new byte, so while the calls run it mostly
    # sleeps rather than competing with them for the other vCPU.
    #
    # A perf that switches its output (switch_output) keeps the default: on a switch it writes only what
    # it has read from the ring, and with a flush threshold the last calls' events would stay there
    # for the next file. Its reads after the 'disable' that ends each run empty the ring. Nor does it
    # get -q, which would silence the "[ perf record: Dump FILE ]" line that says a file is complete.
    argv = [shutil.which("perf") or "perf", "record", "-a", "-k", "mono", "-m", str(mmap_pages),
            "--no-buildid", "-o", str(output)]
    if not switch_output:
        argv[-2:-2] = ["--mmap-flush", str(mmap_pages * os.sysconf("SC_PAGESIZE") // 4), "-q"]
    if control:
        argv += ["-D", "-1", f"--control=fifo:{control[0]},{control[1]}"]
    if switch_output:
        argv += ["--switch-output=signal"]
    for ev in events:
        argv += ["-e", ev]
        flt = event_filter(ev, procnames, devices)
        if flt:
            argv += ["--filter", flt]
    return argv


class PerfRecorder:
    """One `perf record` process: start (enabled once it acknowledges), stop, convert to CTF.

    persistent=True keeps one perf for many runs: it starts disabled, enable() and disable() switch
    its events on and off through the control fifo (a few ms), and dump(dest) has it write what it
    recorded since the last dump into dest (--switch-output). Why: closing perf's tracepoint events
    takes the kernel about 1.6 s for this capture's 29 events on 2 CPUs, once per perf process."""

    def __init__(self, workdir, data_path, events, devices, procnames=PROCNAMES, mmap_pages=MMAP_PAGES,
                 persistent=False):
        self.workdir = pathlib.Path(workdir)
        self.data = pathlib.Path(data_path)
        self.events = events
        self.devices = devices
        self.procnames = procnames
        self.mmap_pages = mmap_pages
        self.persistent = persistent
        self.proc = None
        self.stderr_path = self.workdir / (self.data.name + ".log")
        self._fifos = (self.workdir / "perf-ctl.fifo", self.workdir / "perf-ack.fifo")
        self._fds = None
        self._dumps = 0                  # dump files perf has reported writing

    def start(self, timeout=20):
        self.workdir.mkdir(parents=True, exist_ok=True)
        for f in self._fifos:
            f.unlink(missing_ok=True)
            os.mkfifo(f)
        argv = record_argv(self.data, self.events, self.devices, self.procnames, self.mmap_pages, self._fifos,
                           switch_output=self.persistent)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)
        leftovers.note("processes", (self.proc.pid, "perf record"))     # a killed capture's perf is found by it
        # Open the fifos without blocking forever if perf dies before opening its ends.
        deadline = time.monotonic() + timeout
        try:
            while not self._fds:
                if self.proc.poll() is not None:
                    raise UserError(f"perf record exited at start ({self.proc.returncode}): {self._err()}")
                try:
                    self._fds = (os.open(self._fifos[0], os.O_WRONLY | os.O_NONBLOCK),)
                except OSError:
                    if time.monotonic() > deadline:
                        raise UserError(f"perf record did not start within {timeout}s: {self._err()}") from None
                    time.sleep(0.02)
            self._fds += (os.open(self._fifos[1], os.O_RDONLY | os.O_NONBLOCK),)
            if not self.persistent:
                self.enable(timeout)
        finally:
            if not self.persistent:
                self._close_fifos()

    def _close_fifos(self):
        for fd in self._fds or ():
            os.close(fd)
        self._fds = None
        for f in self._fifos:
            f.unlink(missing_ok=True)

    def _command(self, cmd, timeout=20):
        """Write a control command and wait for perf's ack."""
        if not self._fds or len(self._fds) < 2:
            raise UserError(f"perf record: no control fifo to send {cmd!r} (not started)")
        ctl_fd, ack_fd = self._fds
        deadline = time.monotonic() + timeout
        os.write(ctl_fd, cmd.encode() + b"\n")
        buf = b""
        while b"ack" not in buf:
            if self.proc.poll() is not None:
                raise UserError(f"perf record exited ({self.proc.returncode}) on {cmd!r}: {self._err()}")
            if time.monotonic() > deadline:
                raise UserError(f"perf record did not acknowledge {cmd!r} within {timeout}s: {self._err()}")
            try:
                buf += os.read(ack_fd, 64)
            except BlockingIOError:
                pass
            time.sleep(0.002)

    def enable(self, timeout=20):
        self._command("enable", timeout)

    def disable(self, timeout=20):
        self._command("disable", timeout)

    def _dump_paths(self):
        return re.findall(r"\[ perf record: Dump (\S+) \]", self._err(None))

    def dump(self, dest, timeout=60):
        """(persistent) Have perf write the events recorded since the last dump into a file of their
        own and move it to dest; returns dest."""
        if not self.alive():
            raise UserError(f"perf record is not running (exit {self.proc.returncode if self.proc else None}): "
                            f"{self._err()}")
        self.proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + timeout
        while True:
            paths = self._dump_paths()
            if len(paths) > self._dumps and pathlib.Path(paths[self._dumps]).is_file():
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise UserError(f"perf record did not write its data on SIGUSR2 within {timeout}s: {self._err()}")
            time.sleep(0.005)
        src = pathlib.Path(paths[self._dumps])
        self._dumps += 1
        dest = pathlib.Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(dest))
        return dest

    def _err(self, tail=500):
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return text.strip()[-tail:] if tail else text

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=60):
        """SIGINT (perf writes its data and exits); kill if it does not. A persistent recorder's last
        data (recorded after the last dump: nothing, it is disabled) is deleted."""
        if not self.proc:
            return
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
                    raise UserError(f"perf record did not stop within {timeout}s; killed")
        finally:
            self._leftovers()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._leftovers()

    def _leftovers(self):
        if self.proc:
            leftovers.forget("processes", self.proc.pid)
        if self._fds:
            self._close_fifos()
        if self.persistent:
            for f in self.data.parent.glob(self.data.name + "*"):
                f.unlink(missing_ok=True)


def stats(data_path, timeout=120):
    """{"samples": {event: n}, "lost": n} from `perf report --stats`."""
    p = subprocess.run(["perf", "report", "--stats", "-i", str(data_path)], capture_output=True, text=True,
                       timeout=timeout)
    samples, lost, current = {}, 0, None
    for line in p.stdout.splitlines():
        m = re.match(r"^(\S+:\S+) stats:\s*$", line.strip())
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\s*(LOST|LOST_SAMPLES) events:\s+(\d+)", line)
        if m and current is None:
            lost += int(m.group(2))
            continue
        m = re.match(r"^\s*SAMPLE events:\s+(\d+)", line)
        if m and current:
            samples[current] = int(m.group(1))
    return {"samples": samples, "lost": lost}


def convert_to_ctf(data_path, ctf_dir, timeout=600):
    p = subprocess.run(["perf", "data", "convert", "--to-ctf", str(ctf_dir), "-i", str(data_path)],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0 or not (pathlib.Path(ctf_dir) / "metadata").exists():
        raise UserError(f"perf data convert --to-ctf failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}")


CLOCK_RE = re.compile(r"clock\s*\{(?P<body>[^}]*)\}", re.S)


def ust_clock(ust_dir):
    """(uuid, offset_s, offset) of the LTTng-UST trace's `monotonic` clock class, from its metadata."""
    metas = sorted(pathlib.Path(ust_dir).rglob("metadata"))
    if not metas:
        return None
    p = subprocess.run(["babeltrace2", "--output-format=ctf-metadata", str(metas[0].parent)],
                       capture_output=True, text=True, timeout=60)
    m = CLOCK_RE.search(p.stdout)
    if not m:
        return None
    body = m.group("body")
    uuid = re.search(r'uuid\s*=\s*"([^"]+)"', body)
    off_s = re.search(r"\boffset_s\s*=\s*(-?\d+)", body)
    off = re.search(r"\boffset\s*=\s*(-?\d+)", body)
    if not uuid:
        return None
    return uuid.group(1), int(off_s.group(1)) if off_s else 0, int(off.group(1)) if off else 0


def align_clock(ctf_dir, clock):
    """Give perf's clock class the UST clock's UUID, offset and absolute = TRUE.

    Both count CLOCK_MONOTONIC nanoseconds (`perf record -k mono`), so after
    this babeltrace2's muxer merges the kernel and user traces into one
    correctly ordered stream (it refuses to otherwise, see STEPS.md).
    """
    meta = pathlib.Path(ctf_dir) / "metadata"
    text = meta.read_text()
    uuid, off_s, off = clock

    def fix(m):
        body = m.group("body")
        body = re.sub(r'uuid\s*=\s*"[^"]+"', f'uuid = "{uuid}"', body)
        body = re.sub(r"\boffset_s\s*=\s*-?\d+", f"offset_s = {off_s}", body)
        body = re.sub(r"\boffset\s*=\s*-?\d+", f"offset = {off}", body)
        body = re.sub(r"\babsolute\s*=\s*\w+", "absolute = TRUE", body)
        return "clock {" + body + "}"

    new, n = CLOCK_RE.subn(fix, text, count=1)
    if n != 1:
        raise UserError(f"{meta}: no clock class to align")
    meta.write_text(new)


def version():
    p = subprocess.run(["perf", "--version"], capture_output=True, text=True, timeout=10)
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", p.stdout)
    return m.group(1) if m else p.stdout.strip()
