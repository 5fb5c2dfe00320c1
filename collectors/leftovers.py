"""What a capture started, recorded as it starts it, and the leftovers of a capture that was killed.

A capture interrupted by Ctrl-C or SIGTERM stops everything it started (capture.py cleanup). A
SIGKILL (or a crash of the machine's OOM killer) gives it no chance: its rpc-server (`--duration
900`), its perf, its LTTng sessions and tracefs instances would stay, and the next capture's server
would meet "Address already in use". So a capture keeps what it starts in RUN/capture-state.json
(and a copy in /run/rpcscope/captures/PID.json, where the next one finds it), written *before*
each session or instance is made and as soon as each process has its pid, and removes both files
when it ends cleanly:

    state = CaptureState(run_dir); state.open()
    state.add("lttng_sessions", name)         # before `lttng create`
    state.remove("lttng_sessions", name)      # once destroyed
    state.close()                             # clean end

`clean()` (the next capture, `rpcscope testbed down`) removes what dead captures recorded, and what
it recognises as rpcscope's own without a record: tracefs instances named `rpcscope-PID-...` of a
PID no longer alive, `rpcs-capture-*` LTTng sessions no live capture recorded, and rpc-server
processes of this checkout's build started by a capture (`--ready-file ...server-*.ready`) whose
capture is gone. It says what it removed, one line each. A live capture's things (its pid alive,
with the start time it recorded) are never touched.
"""
import datetime
import json
import os
import pathlib
import re
import shutil
import signal
import time

from rpcscope import ROOT
from rpcscope.output import UserError
from rpcscope.rundir import CAPTURE_STATE, RunDir

from . import lttng

REGISTRY = pathlib.Path(os.environ.get("RPCSCOPE_CAPTURE_REGISTRY", "/run/rpcscope/captures"))
STATE_NAME = CAPTURE_STATE
KINDS = ("processes", "lttng_sessions", "tracefs_instances")
INSTANCE_RE = re.compile(r"rpcscope-(?:evcost-)?(\d+)(?:-\d+)?$")
SESSION_PREFIX = "rpcs-capture-"
TRACEFS = pathlib.Path("/sys/kernel/tracing")        # TRACEFS (perf and ftrace record through this module)

_active = None          # the CaptureState of the capture running in this process, if any


def start_time(pid):
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None when it
    is gone or a zombie: with the pid, it names one process even after the pid is reused."""
    try:
        st = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = st.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def same_process(pid, start):
    return pid is not None and start is not None and start_time(pid) == start


def _cmdline(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


class CaptureState:
    """What one capture (this process) has started and not yet stopped."""

    def __init__(self, run_dir):
        self.run_dir = pathlib.Path(run_dir).resolve()
        self.path = self.run_dir / STATE_NAME
        self.copy = REGISTRY / f"{os.getpid()}.json"
        self.data = {"pid": os.getpid(), "pid_start": start_time(os.getpid()), "run": str(self.run_dir),
                     "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "processes": [], "lttng_sessions": [], "tracefs_instances": [], "sessiond_started": None}

    def open(self):
        global _active
        self._save()
        _active = self

    def _save(self):
        _write_json(self.path, self.data)
        _write_json(self.copy, self.data)

    def add(self, kind, value):
        if kind == "processes":
            value = {"pid": value[0], "start": start_time(value[0]), "name": value[1]}
            # Those that ended on their own (a client after its calls) are dropped as the list grows.
            self.data[kind] = [x for x in self.data[kind] if same_process(x["pid"], x["start"])]
        self.data[kind].append(value)
        self._save()

    def remove(self, kind, value):
        items = self.data[kind]
        keep = [x for x in items if (x["pid"] if kind == "processes" else x) != value]
        if len(keep) != len(items):
            self.data[kind] = keep
            self._save()

    def set(self, key, value):
        self.data[key] = value
        self._save()

    def close(self):
        global _active
        for f in (self.path, self.copy):
            f.unlink(missing_ok=True)
        if _active is self:
            _active = None


def note(kind, value):
    """Record, in the running capture's state (if any), something it is about to start (a process:
    (pid, name) once it has its pid)."""
    if _active is not None:
        _active.add(kind, value)


def note_sessiond(pid):
    """The running capture started this lttng-sessiond (None: it stopped it)."""
    if _active is not None:
        _active.set("sessiond_started", {"pid": pid, "start": start_time(pid)} if pid else None)


def forget(kind, value):
    """The running capture stopped it (a process: by pid)."""
    if _active is not None:
        _active.remove(kind, value)


def _states():
    """(live, dead) capture states found in REGISTRY: a state is live while its capture's process is."""
    live, dead = [], []
    for f in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            st = json.loads(f.read_text())
            pid = int(st["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            f.unlink(missing_ok=True)          # a torn copy: nothing can be read from it
            continue
        st["_file"] = f
        (live if same_process(pid, st.get("pid_start")) else dead).append(st)
    return live, dead


def _kill(pid, start, what, removed):
    if not same_process(pid, start):
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and same_process(pid, start):
            time.sleep(0.05)
        if not same_process(pid, start):
            break
    removed.append(f"{what} (pid {pid})" + ("" if not same_process(pid, start) else ": it would not stop"))


def _remove_instance(name, removed):
    path = TRACEFS / "instances" / name
    if not path.is_dir():
        return
    try:
        (path / "tracing_on").write_text("0")
    except OSError:
        pass
    for _ in range(30):                 # busy while a reader still holds it
        try:
            path.rmdir()
            removed.append(f"tracefs instance {name}")
            return
        except OSError:
            time.sleep(0.1)
    removed.append(f"tracefs instance {name}: could not remove it (`rmdir {path}`)")


def _session_names():
    """The session daemon's sessions; none where lttng is not installed or does not answer."""
    if not shutil.which("lttng"):
        return []
    try:
        return [n for n in lttng.session_names() if n]
    except UserError:
        return []


def _destroy_session(name, removed):
    try:
        p = lttng.run_lttng(["destroy", name], check=False)
        why = "" if p.returncode == 0 else f": destroy failed ({p.stderr.strip()[-120:]})"
    except UserError as e:
        why = f": destroy failed ({e})"
    removed.append(f"lttng session {name}{why}")


def _our_server(pid, live_pids):
    """An rpc-server of this checkout's build started by a capture (its --ready-file) whose parent is
    no live capture: the leftover of a killed one."""
    argv = _cmdline(pid)
    if not argv or not argv[0].endswith(b"/rpc-server") or b"--ready-file" not in argv:
        return False
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    if not exe.startswith(str(ROOT / "build") + "/"):
        return False
    ready = argv[argv.index(b"--ready-file") + 1] if argv.index(b"--ready-file") + 1 < len(argv) else b""
    if not pathlib.Path(ready.decode(errors="replace")).name.startswith("server-"):
        return False
    try:
        ppid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return False
    parent = b" ".join(_cmdline(ppid))
    return ppid not in live_pids and b"rpcscope" not in parent and b"pytest" not in parent


CAPTURE_COMMANDS = (b"capture", b"run")


def _capture_processes(skip):
    """Pids of other rpcscope processes that may be capturing (`rpcscope capture|run|bench capture`,
    under whatever wrapper), ours and our parents' left out."""
    mine, pid = set(skip), os.getpid()
    while pid > 1:                                   # `rpcscope run` calls `testbed down` in its own process
        mine.add(pid)
        try:
            pid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    out = []
    for x in os.listdir("/proc"):
        if not x.isdigit() or int(x) in mine:
            continue
        argv = _cmdline(int(x))
        if any(b"rpcscope" in a for a in argv) and any(a in CAPTURE_COMMANDS for a in argv):
            out.append(int(x))
    return out


def clean(exclude_pid=None, scan=True):
    """Remove the leftovers of killed captures; returns one line per thing removed (empty: none).
    exclude_pid: a capture to leave alone besides the live ones (the caller itself); scan=False: only
    what dead captures recorded, not what is recognised without a record."""
    removed = []
    live, dead = _states()
    live_pids = {int(st["pid"]) for st in live} | {os.getpid()} | ({exclude_pid} if exclude_pid else set())
    live_sessions = {n for st in live for n in st.get("lttng_sessions") or []}
    live_instances = {n for st in live for n in st.get("tracefs_instances") or []}
    for st in dead:
        who = f"capture pid {st['pid']} ({st.get('run')})"
        for p in st.get("processes") or []:
            _kill(p.get("pid"), p.get("start"), f"{p.get('name', 'process')} of the killed {who}", removed)
        present = set(_session_names()) if st.get("lttng_sessions") else set()
        for n in st.get("lttng_sessions") or []:
            if n in present:
                _destroy_session(n, removed)
        for n in st.get("tracefs_instances") or []:
            _remove_instance(n, removed)
        sd = st.get("sessiond_started") or {}
        if sd and not live and not _capture_processes(live_pids):      # no capture may be using it
            _kill(sd.get("pid"), sd.get("start"), f"lttng-sessiond started by the killed {who}", removed)
        run_state = pathlib.Path(st.get("run") or "") / STATE_NAME
        if st.get("run") and run_state.is_file():
            _mark_killed(pathlib.Path(st["run"]), removed)
            run_state.unlink(missing_ok=True)
        st["_file"].unlink(missing_ok=True)
    if not scan:
        return removed
    # What no record names: the capture was killed before it wrote one, or the record is gone.
    inst_dir = TRACEFS / "instances"
    for d in sorted(inst_dir.iterdir()) if inst_dir.is_dir() else []:
        m = INSTANCE_RE.fullmatch(d.name)
        if m and d.name not in live_instances and int(m.group(1)) not in live_pids \
                and start_time(int(m.group(1))) is None:
            _remove_instance(d.name, removed)
    # Listed before the live records are read again: a live capture records a session before it
    # creates it, so every live session listed here is in the records read after.
    # An unrecorded session is only taken for a leftover while no other capture runs at all (one
    # started by code that kept no record would otherwise lose its sessions).
    names = [n for n in _session_names() if n.startswith(SESSION_PREFIX)]
    live_sessions |= {n for st in _states()[0] for n in st.get("lttng_sessions") or []}
    others = _capture_processes(live_pids)
    for n in names:
        if n not in live_sessions and not others:
            _destroy_session(n, removed)
    for pid in (int(x) for x in os.listdir("/proc") if x.isdigit()):
        if pid not in live_pids and _our_server(pid, live_pids):
            _kill(pid, start_time(pid), "rpc-server of a killed capture", removed)
    return removed


def _mark_killed(run_dir, removed):
    """The killed capture's manifest says what became of it: interrupted, not complete."""
    mf = RunDir(run_dir).manifest_path
    try:
        m = json.loads(mf.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(m, dict) or m.get("complete"):
        return
    m.update(interrupted=True, complete=False, killed=True)
    _write_json(mf, m)
    removed.append(f"{mf}: marked interrupted (the capture was killed)")


def report(lines, say):
    """Print what clean() removed, as the capture and `testbed down` say it."""
    if lines:
        say(f"removed the leftovers of a killed capture ({len(lines)}):")
        for line in lines:
            say(f"  {line}")
