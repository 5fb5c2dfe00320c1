"""Reading traces: the one module of rpcscope that decodes CTF.

Every other part of the analysis sees events as columns (NumPy arrays) in one
vocabulary, whether they came from LTTng-UST, from `perf data convert
--to-ctf` (names like ``syscalls:sys_enter_sendto``, ``net:net_dev_xmit``,
``irq:softirq_entry``) or from LTTng's kernel tracer (``syscall_entry_sendto``,
``net_dev_xmit``, ``irq_softirq_entry``, ``net_if_receive_skb``).

    from rpcscope.analysis.traceread import read_trace, KIND
    ev = read_trace("runs/x/cases/udp-null-0/kernel", cache_dir="runs/x/analysis/cache")
    ev.ts, ev.kind, ev.tid, ...          # columns, one row per event, time-sorted
    ev.name_of(i)                        # "sendto", "c3_begin", "net_dev_xmit", ...
    ev.problems                          # discarded events, truncated streams, ...

Columns (all the same length):
    ts      int64   CLOCK_MONOTONIC ns: the raw clock value of the trace's clock
                    (LTTng's clock class carries an offset to the epoch, perf's
                    does not; both count CLOCK_MONOTONIC, so the raw value is the
                    comparable one on one host)
    cpu     int16   CPU the event was recorded on (-1 unknown)
    tid     int32   thread that was running (UST: vtid; perf: perf_tid; LTTng
                    kernel: the tid context, or the CPU's current thread from
                    sched_switch; -1 unknown)
    pid     int32   process (UST: vpid; perf: perf_pid; -1 unknown)
    kind    uint8   KIND code (user event, syscall entry/exit, net xmit, ...)
    name    int32   index into `names`: user event without provider ("c3_begin"),
                    syscall name ("sendto"), or the normalised kernel event name
    call_id uint64  user: the call id
    frag    int32   user: fragment or window number (-1 none)
    nbytes  int64   user: bytes; net: skb len; syscall exit: return value
    skb     uint64  net and copy events: skbaddr
    dev     int32   net: index into `names` of the device name (-1 none)
    tid2    int32   sched_switch: next tid; sched_waking/wakeup: the woken tid
    state   int64   sched_switch: prev_state
    vec     int32   softirq: vector (3 = NET_RX); irq: irq number; waking: target CPU
    src     uint8   index into `sources` (one per trace directory read)
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import threading
from array import array

import numpy as np

from rpcscope.tracepoints import KERNEL_EVENTS, KERNEL_SYSCALLS

from . import native

READER_VERSION = 1

# Kinds of events: the vocabulary the rest of the analysis uses. The kernel's come from the step catalog
# (tracepoints/steps.toml [kernel_events]), which also gives analysis/ctfcols.c its numbering.
KIND = {"other": 0, "user": 1, "syscall_entry": 2, "syscall_exit": 3,
        **{k: e["code"] for k, e in KERNEL_EVENTS.items() if "code" in e}}
KIND_NAME = {v: k for k, v in KIND.items()}
NET_RX_VEC = 3

COLUMNS = {
    "ts": "q", "cpu": "h", "tid": "i", "pid": "i", "kind": "B", "name": "i", "call_id": "Q",
    "frag": "i", "nbytes": "q", "skb": "Q", "dev": "i", "tid2": "i", "state": "q", "vec": "i", "src": "B",
}
_NP = {"q": np.int64, "h": np.int16, "i": np.int32, "B": np.uint8, "Q": np.uint64}

# Every spelling of a kernel event kind (perf's and tracefs's subsystem:event, LTTng's, the bare name):
# all map to one kind and one name.
_KERNEL_NAMES = {raw: kind for kind, e in KERNEL_EVENTS.items() if "code" in e
                 for raw in (e["perf"], e.get("lttng"), e["name"], *e.get("aliases", ())) if raw}
_KERNEL_NAME = {kind: e["name"] for kind, e in KERNEL_EVENTS.items() if "code" in e}


def normalise(raw):
    """(kind, name) for a raw event name of any of the three tracers.

    >>> normalise("syscalls:sys_enter_sendto"), normalise("syscall_entry_sendto")
    (('syscall_entry', 'sendto'), ('syscall_entry', 'sendto'))
    """
    if raw.startswith("rpcscope:"):
        return "user", raw[len("rpcscope:"):]
    for prefix, kind in KERNEL_SYSCALLS.items():
        if raw.startswith(prefix):
            return kind, raw[len(prefix):]
    kind = _KERNEL_NAMES.get(raw)
    if kind is not None:
        return kind, _KERNEL_NAME[kind]       # one name per kind whatever the tracer called it
    return "other", raw


class TraceError(Exception):
    """A trace that cannot be read at all (missing, not CTF)."""


class Events:
    """Columns of one or more traces, sorted by time, plus what went wrong reading them."""

    def __init__(self, cols, names, sources, problems, threads):
        self.cols = cols
        self.names = names
        self.sources = sources      # [{"path", "clock": {...}, "tracer", "events", "partial"}]
        self.problems = problems    # [{"source", "what", "message", "count"?, "begin_ns"?, "end_ns"?}]
        self.threads = threads      # {tid: {"pid", "procname"}} as far as the trace says
        self._name_ids = {n: i for i, n in enumerate(names)}

    def __getattr__(self, key):
        cols = self.__dict__.get("cols")
        if cols is not None and key in cols:
            return cols[key]
        raise AttributeError(key)

    def __len__(self):
        return len(self.cols["ts"])

    @property
    def partial(self):
        return any(p["what"] in ("truncated", "corrupt", "missing", "metadata") for p in self.problems)

    @property
    def lossy(self):
        return any(p["what"] in ("discarded_events", "discarded_packets") for p in self.problems)

    def name_of(self, i):
        return self.names[int(self.cols["name"][i])]

    def name_id(self, name):
        """The name's index, or -1 when no event has it."""
        return self._name_ids.get(name, -1)

    def mask(self, kind=None, name=None):
        m = np.ones(len(self), bool)
        if kind is not None:
            m &= self.cols["kind"] == KIND[kind]
        if name is not None:
            m &= self.cols["name"] == self.name_id(name)
        return m

    def select(self, m):
        return Events({k: v[m] for k, v in self.cols.items()}, self.names, self.sources, self.problems, self.threads)

    def summary(self):
        kinds = np.bincount(self.cols["kind"], minlength=len(KIND)) if len(self) else np.zeros(len(KIND), int)
        return {"events": len(self), "by_kind": {KIND_NAME[k]: int(n) for k, n in enumerate(kinds) if n},
                "problems": self.problems, "partial": self.partial, "lossy": self.lossy}


# ---------------------------------------------------------------- decoding with bt2

class _Builder:
    def __init__(self):
        self.c = {k: array(t) for k, t in COLUMNS.items()}
        self.names = []
        self.ids = {}
        self.threads = {}

    def intern(self, s):
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.names)
            self.names.append(s)
        return i

    def columns(self):
        out = {}
        for k, a in self.c.items():
            out[k] = np.frombuffer(a, dtype=_NP[COLUMNS[k]]).copy() if len(a) else np.zeros(0, _NP[COLUMNS[k]])
            a.clear() if hasattr(a, "clear") else None
        return out


def _field(ev, name, default=None):
    """A field from any scope (payload, contexts, packet context), or default."""
    for getter in ("payload_field", "specific_context_field", "common_context_field"):
        f = getattr(ev, getter)
        if f is not None and name in f:
            return f[name]
    pkt = ev.packet
    if pkt is not None and pkt.context_field is not None and name in pkt.context_field:
        return pkt.context_field[name]
    return default


def _int(v, default=-1):
    return default if v is None else int(v)


def _decoder(ev, b):
    """Build, once per event class, a function that appends one event's row."""
    raw = ev.name
    kind, name = normalise(raw)
    kcode = KIND[kind]
    nid = b.intern(name)
    payload = ev.payload_field
    names = set(payload.keys()) if payload is not None else set()
    ctx = ev.common_context_field
    ctx_names = set(ctx.keys()) if ctx is not None else set()

    def has(n):
        return n in names

    # Thread and process: UST contexts vtid/vpid, LTTng kernel contexts tid/pid,
    # perf's perf_tid/perf_pid payload fields; else -1 (filled from sched_switch).
    tid_key = next((k for k in ("vtid", "tid") if k in ctx_names), None)
    pid_key = next((k for k in ("vpid", "pid") if k in ctx_names), None)
    proc_key = "procname" if "procname" in ctx_names else None
    perf = has("perf_tid")

    def common(ev, ts, cpu, c):
        if perf:
            p = ev.payload_field
            tid, pid = int(p["perf_tid"]), int(p["perf_pid"])
        else:
            cc = ev.common_context_field
            tid = int(cc[tid_key]) if tid_key else -1
            pid = int(cc[pid_key]) if pid_key else -1
            if proc_key and tid >= 0 and tid not in b.threads:
                b.threads[tid] = {"pid": pid, "procname": str(cc[proc_key])}
        c["ts"].append(ts)
        c["cpu"].append(cpu)
        c["tid"].append(tid)
        c["pid"].append(pid)
        c["kind"].append(kcode)
        c["name"].append(nid)

    def put(c, call_id=0, frag=-1, nbytes=-1, skb=0, dev=-1, tid2=-1, state=-1, vec=-1):
        c["call_id"].append(call_id)
        c["frag"].append(frag)
        c["nbytes"].append(nbytes)
        c["skb"].append(skb)
        c["dev"].append(dev)
        c["tid2"].append(tid2)
        c["state"].append(state)
        c["vec"].append(vec)

    if kind == "user":
        fkey = "frag" if has("frag") else ("window" if has("window") else None)
        bkey = "bytes" if has("bytes") else ("frags" if has("frags") else None)

        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            p = ev.payload_field
            put(c, call_id=int(p["call_id"]), frag=int(p[fkey]) if fkey else -1,
                nbytes=int(p[bkey]) if bkey else -1)
    elif kind == "syscall_exit":
        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            put(c, nbytes=int(ev.payload_field["ret"]) if has("ret") else -1)
    elif kind in ("net_queue", "net_start_xmit", "net_xmit", "net_receive", "net_rx", "copy_to_user"):
        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            p = ev.payload_field
            put(c, skb=int(p["skbaddr"]), nbytes=int(p["len"]) if has("len") else -1,
                dev=b.intern(str(p["name"])) if has("name") else -1)
    elif kind in ("softirq_entry", "softirq_exit", "softirq_raise"):
        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            put(c, vec=int(ev.payload_field["vec"]))
    elif kind in ("irq_entry", "irq_exit"):
        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            put(c, vec=int(ev.payload_field["irq"]))
    elif kind in ("sched_waking", "sched_wakeup"):
        tkey = "pid" if has("pid") and perf else "tid"
        ckey = "comm" if has("comm") else None

        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            p = ev.payload_field
            wakee = int(p[tkey])
            if ckey and wakee not in b.threads:
                b.threads[wakee] = {"pid": -1, "procname": str(p[ckey])}
            put(c, tid2=wakee, vec=int(p["target_cpu"]) if has("target_cpu") else -1)
    elif kind == "sched_switch":
        prev_key, next_key = ("prev_pid", "next_pid") if has("prev_pid") else ("prev_tid", "next_tid")

        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            p = ev.payload_field
            nxt = int(p["next_tid" if next_key == "next_tid" else "next_pid"])
            if nxt not in b.threads and has("next_comm"):
                b.threads[nxt] = {"pid": -1, "procname": str(p["next_comm"])}
            put(c, tid2=nxt, state=int(p["prev_state"]))
            if not perf and tid_key is None:
                c["tid"][-1] = int(p[prev_key])
    else:
        def f(ev, ts, cpu, c):
            common(ev, ts, cpu, c)
            put(c)
    return f


def _cpu_of(ev):
    pkt = ev.packet
    if pkt is not None and pkt.context_field is not None and "cpu_id" in pkt.context_field:
        return int(pkt.context_field["cpu_id"])
    return -1


def _decode(path, b, src, problems, stream_files=None):
    """Append the events of the CTF trace(s) under path to builder b.

    Returns (events, clock info, error message or None)."""
    import bt2

    decoders = {}
    cpus = {}
    clock = None
    n = 0
    c = b.c
    err = None
    E, DE, DP = bt2._EventMessageConst, bt2._DiscardedEventsMessageConst, bt2._DiscardedPacketsMessageConst
    dirs = [str(d) for d in _stream_files(path)]
    aborted = _aborts_libbabeltrace2(dirs)
    if aborted:
        return 0, None, aborted
    try:
        # An explicit source.ctf.fs per trace directory: bt2 2.0's auto-discovery
        # aborts the process on unparsable metadata instead of raising.
        fs = bt2.find_plugin("ctf").source_component_classes["fs"]
        it = bt2.TraceCollectionMessageIterator([bt2.ComponentSpec(fs, {"inputs": dirs})])
        for msg in it:
            t = type(msg)
            if t is E:
                ev = msg.event
                key = ev.cls.addr
                f = decoders.get(key)
                if f is None:
                    f = decoders[key] = _decoder(ev, b)
                cs = msg.default_clock_snapshot
                if clock is None:
                    cc = cs.clock_class
                    clock = {"name": cc.name, "uuid": str(cc.uuid) if cc.uuid else None,
                             "frequency": cc.frequency, "origin_is_unix_epoch": cc.origin_is_unix_epoch,
                             "offset_ns": cc.offset.seconds * 10**9 + cc.offset.cycles * 10**9 // cc.frequency}
                    freq = cc.frequency
                v = cs.value if freq == 1_000_000_000 else cs.value * 1_000_000_000 // freq
                pkt = ev.packet
                cpu = cpus.get(pkt.addr) if pkt is not None else -1
                if cpu is None:
                    cpu = cpus[pkt.addr] = _cpu_of(ev)
                f(ev, v, cpu, c)
                c["src"].append(src)
                n += 1
            elif t is DE or t is DP:
                what = "discarded_events" if t is DE else "discarded_packets"
                p = {"source": src, "what": what, "count": msg.count}
                if msg.stream.cls.discarded_events_have_default_clock_snapshots if t is DE else \
                        msg.stream.cls.discarded_packets_have_default_clock_snapshots:
                    p["begin_ns"] = msg.beginning_default_clock_snapshot.value
                    p["end_ns"] = msg.end_default_clock_snapshot.value
                problems.append(p)
            elif t is bt2._PacketBeginningMessageConst:
                pass
    except Exception as e:  # bt2._Error, or a decoding error of ours on a corrupt field
        err = _error_text(e)
    return n, clock, err


def _aborts_libbabeltrace2(dirs):
    """libbabeltrace2 2.0 stops some damaged packets with a failed assertion (SIGABRT: a packet
    size whose top bit is set, for one) instead of an error, which would end this process with
    it. So babeltrace2's command line reads the trace first, in a child of its own, through the
    same source.ctf.fs: what it died of, or None (it read the trace, or failed with an error that
    bt2 raises here too, or is not installed)."""
    exe = shutil.which("babeltrace2")
    if not exe or not dirs:
        return None
    inputs = "inputs=[" + ",".join(json.dumps(d) for d in dirs) + "]"
    try:
        r = subprocess.run([exe, "-c", "source.ctf.fs", "-p", inputs, "-o", "dummy"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=1800)
    except subprocess.TimeoutExpired:
        return f"libbabeltrace2 did not finish reading {', '.join(dirs)} in 30 minutes"
    if r.returncode >= 0:
        return None
    last = [ln.strip() for ln in r.stderr.decode(errors="replace").splitlines() if ln.strip()]
    why = next((ln for ln in reversed(last) if "Assertion" in ln or "assert" in ln), last[-1] if last else "")
    return (f"libbabeltrace2 crashed (signal {-r.returncode}) reading {', '.join(dirs)}: the trace is damaged "
            f"in a way it does not report as an error ({why[-240:]})")


def _error_text(e):
    """bt2's error, deepest cause first, without the addresses of its components."""
    try:
        causes = [" ".join(c.message.split()) for c in e]
    except TypeError:
        causes = []
    causes = [c for c in causes if not c.startswith("Component initialization method failed")]
    text = "; ".join(causes[:3]) if causes else " ".join(str(e).split())
    return text[:400] or type(e).__name__


def _stream_files(trace_dir):
    """Data stream files of every CTF trace under trace_dir: {trace dir: [files]}."""
    out = {}
    for meta in sorted(pathlib.Path(trace_dir).rglob("metadata")):
        d = meta.parent
        out[d] = sorted(p for p in d.iterdir() if p.is_file() and p.name != "metadata"
                        and not p.name.startswith(".") and p.stat().st_size > 0)
    return out


def _salvage(trace_dir, b, src, problems):
    """After a decoding error: read each stream file on its own (metadata beside it),
    keeping every stream that decodes and the good packets of the one that does not.
    Returns the streams that did not decode whole, and the clock of the first that did."""
    bad, first_clock = [], None
    with tempfile.TemporaryDirectory(prefix="rpcscope-salvage-") as tmp:
        for k, (tdir, files) in enumerate(_stream_files(trace_dir).items()):
            why = metadata_error(tdir)
            if why:
                # No stream of this trace decodes without its metadata: one problem names the file.
                bad.append({"stream": str(tdir / "metadata"), "events_kept": 0, "what": "metadata",
                            "error": why, "streams_lost": len(files)})
                continue
            for f in files:
                d = pathlib.Path(tmp) / f"{k}-{f.name}"
                d.mkdir()
                os.symlink(os.path.abspath(tdir / "metadata"), d / "metadata")
                os.symlink(os.path.abspath(f), d / f.name)
                before = len(b.c["ts"])
                n, clock, err = _decode(d, b, src, problems)
                first_clock = first_clock or clock
                what = "corrupt"
                if err and len(b.c["ts"]) == before:
                    # ctf.fs indexes every packet before it decodes any: a stream cut
                    # inside a packet fails as a whole. Keep its complete packets.
                    if _decode_prefix(d, f, b, src, problems):
                        what = "truncated"
                    else:
                        cut = _cut_short(d, tmp)
                        if cut:
                            what, err = "truncated", cut
                if err:
                    err = err.replace(str(d / f.name), str(f)).replace(str(d), str(tdir))
                    bad.append({"stream": str(f), "events_kept": len(b.c["ts"]) - before, "error": err,
                                "what": what})
                shutil.rmtree(d)
    return bad, first_clock


def _cut_short(d, tmp):
    """ctfread's word that the one stream in trace directory d ends inside a packet (the file shorter
    than the packet it declares), or None."""
    if not native.available():
        return None
    out = pathlib.Path(tmp) / f"cut-{d.name}"
    try:
        refused = native.extract([d], out).get("ctfread_refused") or ""
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return refused if "cut short" in refused else None


def metadata_error(tdir):
    """Why the CTF metadata of the trace in tdir does not parse (babeltrace2's own words, the line of
    the metadata it stopped at where it says), or None: it parses, or babeltrace2 is not installed.
    The metadata is read alone, without the streams, so a damaged stream does not count."""
    exe = shutil.which("babeltrace2")
    meta = pathlib.Path(tdir) / "metadata"
    if not exe:
        return None
    try:
        size = meta.stat().st_size
    except OSError as e:
        return f"cannot read it: {e.strerror}"
    if size == 0:
        return "the file is empty"
    with tempfile.TemporaryDirectory(prefix="rpcscope-metadata-") as tmp:
        os.symlink(os.path.abspath(meta), pathlib.Path(tmp) / "metadata")
        try:
            r = subprocess.run([exe, "--log-level=E", "-c", "source.ctf.fs", "-p",
                                "inputs=[" + json.dumps(tmp) + "]", "-o", "dummy"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        except subprocess.TimeoutExpired:
            return None
    if r.returncode == 0:
        return None
    lines = r.stderr.decode(errors="replace").splitlines()
    # "... E PLUGIN/CTF/META/PARSER yyerror@parser.y:943 At line 13 in metadata stream: syntax error, ..."
    texts = [m.group(1) for m in (re.search(r"/META\S* \S+@\S+:\d+ (?:\[[^]]*\] )?(.*)$", ln) for ln in lines) if m]
    if texts:
        return " ".join(texts[0].split())[:300]
    if r.returncode < 0:
        return f"babeltrace2 crashed (signal {-r.returncode}) reading it"
    return "babeltrace2 cannot read it as CTF 1.8 metadata"


_MAGIC = (b"\xc1\x1f\xfc\xc1", b"\xc1\xfc\x1f\xc1")   # CTF packet magic, little and big endian


def _decode_prefix(d, f, b, src, problems):
    """Decode the longest prefix of stream f that ends on a packet boundary;
    True if one decodes."""
    data = f.read_bytes()
    starts = sorted({i for m in _MAGIC for i in _find_all(data, m)} - {0})
    if not starts:
        return False
    (d / f.name).unlink()

    def ok(end):
        (d / f.name).write_bytes(data[:end])
        scratch = _Builder()
        return _decode(d, scratch, src, [])[2] is None

    lo, hi = -1, len(starts) - 1     # starts[lo] decodes (lo = -1: none known), find the largest
    if ok(starts[hi]):
        lo = hi
    else:
        hi -= 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(starts[mid]):
                lo = mid
            else:
                hi = mid - 1
    if lo < 0:
        return False
    (d / f.name).write_bytes(data[:starts[lo]])
    return _decode(d, b, src, problems)[2] is None


def _find_all(data, pat):
    i = data.find(pat)
    while i >= 0:
        yield i
        i = data.find(pat, i + 1)


def _cache_key(path):
    h = hashlib.sha256(f"rpcscope-traceread-{READER_VERSION}\0{os.path.realpath(path)}".encode())
    for tdir, files in _stream_files(path).items():
        for f in [tdir / "metadata", *files]:
            st = f.stat()
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:20]


def _save(cache_dir, key, ev):
    d = pathlib.Path(cache_dir) / f"trace-{key}"
    tmp = pathlib.Path(cache_dir) / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for k, v in ev.cols.items():
        np.ascontiguousarray(v, dtype=_NP[COLUMNS[k]]).tofile(tmp / f"{k}.bin")
    _write_meta(tmp, ev)
    shutil.rmtree(d, ignore_errors=True)
    os.replace(tmp, d)


def _write_meta(d, ev):
    (pathlib.Path(d) / "meta.json").write_text(json.dumps({
        "version": READER_VERSION, "names": ev.names, "sources": ev.sources, "problems": ev.problems,
        "threads": {str(k): v for k, v in ev.threads.items()}}))


def _map_columns(d, n=None):
    cols = {}
    for k, t in COLUMNS.items():
        f = pathlib.Path(d) / f"{k}.bin"
        size = f.stat().st_size // np.dtype(_NP[t]).itemsize
        if n is not None and size != n:
            raise ValueError(f"{f}: {size} rows, expected {n}")
        cols[k] = np.memmap(f, dtype=_NP[t], mode="r") if size else np.zeros(0, _NP[t])
    return cols


def _load(cache_dir, key):
    d = pathlib.Path(cache_dir) / f"trace-{key}"
    try:
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("version") != READER_VERSION:
            return None
        cols = _map_columns(d)
    except (OSError, ValueError, KeyError):
        return None
    return Events(cols, meta["names"], meta["sources"], meta["problems"],
                  {int(k): v for k, v in meta["threads"].items()})


def _read_native(path, src, cache_dir, key):
    """Decode with the native extractor straight into the cache directory (or a
    temporary one); None when it stopped on an error (the Python path salvages)."""
    base = pathlib.Path(cache_dir) if key else pathlib.Path(tempfile.mkdtemp(prefix="rpcscope-ctfcols-"))
    tmp = base / f".tmp-native-{os.getpid()}-{threading.get_ident()}" if key else base
    try:
        meta = native.extract(list(_stream_files(path)), tmp)
        with _STATS_LOCK:
            READ_STATS["extractor_peak_rss_kib"] = max(READ_STATS["extractor_peak_rss_kib"],
                                                       meta.get("peak_rss_kib") or 0)
        if meta.get("error"):
            return None
        cols = _map_columns(tmp, meta["events"])
        problems = [{"source": src, **p} for p in meta["problems"]]
        names = meta["names"]
        # Checked a chunk at a time from the files (not through the maps, whose pages would stay
        # resident): in time order, every tid known. Otherwise (rare) the columns are fixed in memory.
        if not _chunks_all(tmp / "ts.bin", np.int64, lambda a, prev: a[0] >= prev and bool(np.all(a[1:] >= a[:-1]))):
            order = np.argsort(cols["ts"], kind="stable")
            cols = {k: np.asarray(v)[order] for k, v in cols.items()}
        if not _chunks_all(tmp / "tid.bin", np.int32, lambda a, prev: bool(np.all(a >= 0))):
            _fill_tids(cols)
        # reader: which decoder read it (ctfcols's own CTF reader, or libbabeltrace2 where that one
        # refused the trace, and why), so a figure's origin can be traced back to the code that made it.
        sources = [{"path": str(path), "clock": meta["clock"], "tracer": _tracer_of(names, meta["clock"]),
                    "events": int(meta["events"]), "partial": False, "reader": meta.get("reader"),
                    "reader_refused": meta.get("ctfread_refused")}]
        ev = Events(cols, names, sources, problems, {int(k): v for k, v in meta["threads"].items()})
        if not key:
            return Events({k: np.array(v) for k, v in cols.items()}, names, sources, problems, ev.threads)
        if isinstance(cols["ts"], np.memmap):   # in time order: only filled tids to write back
            for k, v in cols.items():
                if not isinstance(v, np.memmap) and len(v):
                    np.ascontiguousarray(v, dtype=_NP[COLUMNS[k]]).tofile(tmp / f"{k}.bin.new")
                    os.replace(tmp / f"{k}.bin.new", tmp / f"{k}.bin")
            _write_meta(tmp, ev)
            d = base / f"trace-{key}"
            shutil.rmtree(d, ignore_errors=True)
            os.replace(tmp, d)
            return _load(cache_dir, key)
        _save(cache_dir, key, ev)
        return ev
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _chunks_all(f, dtype, test, size=1 << 18):
    """Whether test(chunk, last value of the previous chunk) holds for every chunk of a column file."""
    n = pathlib.Path(f).stat().st_size // np.dtype(dtype).itemsize
    prev = np.iinfo(dtype).min
    for i in range(0, n, size):
        a = np.fromfile(f, dtype=dtype, count=min(size, n - i), offset=i * np.dtype(dtype).itemsize)
        if not test(a, prev):
            return False
        prev = a[-1]
    return True


# Events returned by read_trace in this process, of them those decoded rather than mapped from the
# cache, the native extractor's largest own peak RSS, and how many traces each reader decoded
# (for `rpcscope bench analysis`).
READ_STATS = {"events": 0, "decoded_events": 0, "extractor_peak_rss_kib": 0, "readers": {}}


def add_read_stats(other):
    """Count another process's READ_STATS (an analysis worker's) as this process's."""
    READ_STATS["events"] += other["events"]
    READ_STATS["decoded_events"] += other["decoded_events"]
    READ_STATS["extractor_peak_rss_kib"] = max(READ_STATS["extractor_peak_rss_kib"], other["extractor_peak_rss_kib"])
    for name, n in other.get("readers", {}).items():
        READ_STATS["readers"][name] = READ_STATS["readers"].get(name, 0) + n


_STATS_LOCK = threading.Lock()          # Run.prefetch reads traces from several threads


def read_trace(path, cache_dir=None, src=0, backend="auto"):
    ev, decoded = _read_trace(path, cache_dir, src, backend)
    with _STATS_LOCK:
        READ_STATS["events"] += len(ev)
        READ_STATS["decoded_events"] += len(ev) if decoded else 0
        if decoded:
            reader = ev.sources[0].get("reader") or "none"
            READ_STATS["readers"][reader] = READ_STATS["readers"].get(reader, 0) + 1
    return ev


def _read_trace(path, cache_dir, src, backend):
    """Decode every CTF trace under path (a LTTng session output, one LTTng
    trace, or perf's converted CTF) into time-sorted Events.

    Problems do not raise: a missing directory, discarded events or packets, and
    a stream that stops decoding (truncated, corrupt) are in .problems, and
    .partial says whether events are missing beyond what the tracer counted.
    With cache_dir, the decoded columns are kept there (one directory of raw
    column files and meta.json per trace, memory-mapped on the next read) and reused while the trace's
    files are unchanged.  backend: "python" (bt2), "native" (build/analysis/ctfcols:
    its own CTF reader, libbabeltrace2 for traces that one refuses; when built) or
    "auto" (native when available). Each source names the reader that decoded it."""
    path = pathlib.Path(path)
    if not path.exists() or not _stream_files(path):
        what = "missing" if not path.exists() else "corrupt"
        msg = f"no trace at {path}" if not path.exists() else f"no CTF trace (no metadata file) under {path}"
        empty = {k: np.zeros(0, _NP[t]) for k, t in COLUMNS.items()}
        return Events(empty, [], [{"path": str(path), "clock": None, "tracer": None, "events": 0, "partial": True}],
                      [{"source": src, "what": what, "file": str(path), "message": msg}], {}), False
    key = _cache_key(path) if cache_dir else None
    if key:
        cached = _load(cache_dir, key)
        if cached is not None:
            return _with_src(cached, src), False
    if backend in ("auto", "native"):
        if native.available():
            ev = _read_native(path, src, cache_dir, key)
            if ev is not None:
                return _with_src(ev, src), True
        elif backend == "native":
            raise TraceError("the native extractor is not built: run `make analysis`")
    ev = _read_python(path, src)
    if key:
        _save(cache_dir, key, ev)
    return ev, True


class StoredTrace:
    """A trace decoded into the cache, read one time range (or chunk) at a time: memory then holds
    the range asked for, not the trace. (read_trace's Events map whole columns, whose pages stay
    resident once touched.) A trace the cache does not hold (no cache_dir, a missing trace) is
    kept in memory as read_trace returned it."""

    def __init__(self, path, cache_dir=None, src=0, backend="auto"):
        ev = read_trace(path, cache_dir=cache_dir, src=src, backend=backend)
        self.names, self.sources, self.problems, self.threads = ev.names, ev.sources, ev.problems, ev.threads
        self.src, self.n = src, len(ev)
        ts = ev.cols["ts"]
        self.dir = pathlib.Path(ts.filename).parent if isinstance(ts, np.memmap) else None
        self._ev = None if self.dir else ev

    def __len__(self):
        return self.n

    def span(self, lo=None, hi=None, columns=None):
        """Events with lo <= ts <= hi (None: that end open); columns: only those (ts always)."""
        if not self.n:
            return self._rows(0, 0, columns)
        ts = self._ev.cols["ts"] if self._ev is not None else np.memmap(self.dir / "ts.bin", np.int64, mode="r")
        i = 0 if lo is None else int(ts.searchsorted(lo, "left"))
        j = self.n if hi is None else int(ts.searchsorted(hi, "right"))
        del ts                      # unmaps: only the pages of the binary search were touched
        return self._rows(i, max(i, j), columns)

    def chunks(self, size=1 << 20, columns=None):
        """The whole trace as Events of at most `size` rows each, in time order."""
        for i in range(0, self.n, size):
            yield self._rows(i, min(i + size, self.n), columns)

    def _rows(self, i, j, columns=None):
        keys = [k for k in COLUMNS if columns is None or k == "ts" or k in columns]
        if self._ev is not None:
            return Events({k: self._ev.cols[k][i:j] for k in keys}, self.names, self.sources, self.problems,
                          self.threads)
        cols = {}
        for k in keys:
            dt = np.dtype(_NP[COLUMNS[k]])
            cols[k] = np.fromfile(self.dir / f"{k}.bin", dtype=dt, count=j - i, offset=i * dt.itemsize)
        if self.src and "src" in cols:
            cols["src"][:] = self.src
        return Events(cols, self.names, self.sources, self.problems, self.threads)


def _with_src(ev, src):
    if src and len(ev):
        ev.cols["src"] = np.full(len(ev), src, np.uint8)
        for p in ev.problems:
            p["source"] = src
    return ev


def _read_python(path, src):
    b = _Builder()
    problems = []
    n, clock, err = _decode(path, b, src, problems)
    partial = False
    if err:
        # Start over stream by stream, so that one bad stream costs only its own tail.
        b = _Builder()
        problems = [p for p in problems if p["what"] not in ("discarded_events", "discarded_packets")]
        bad, salvaged_clock = _salvage(path, b, src, problems)
        for x in bad:
            problems.append({"source": src, "what": x["what"], "stream": x["stream"], "file": x["stream"],
                             "events_kept": x["events_kept"], "message": x["error"],
                             **({"streams_lost": x["streams_lost"]} if "streams_lost" in x else {})})
        if not bad:
            problems.append({"source": src, "what": "corrupt", "message": err})
        partial = True
        clock = clock or salvaged_clock
    cols = b.columns()
    if len(cols["ts"]) and np.any(np.diff(cols["ts"]) < 0):
        order = np.argsort(cols["ts"], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
    _fill_tids(cols)
    tracer = _tracer_of(b.names, clock)
    sources = [{"path": str(path), "clock": clock, "tracer": tracer, "events": len(cols["ts"]), "partial": partial,
                "reader": "bt2-python"}]
    return Events(cols, b.names, sources, problems, b.threads)


def _tracer_of(names, clock):
    if clock and clock.get("name") == "perf_clock":
        return "perf"
    if clock and clock.get("name") == "ftrace_mono":       # collectors/ftrace.py: perf's dialect
        return "ftrace"
    if any(n.startswith(("c", "s")) and n[1:2].isdigit() for n in names):
        return "lttng-ust"
    return "lttng-kernel" if clock else None


def _fill_tids(cols):
    """Kernel events without a tid (LTTng kernel trace without the tid context):
    the thread is the one the CPU last switched to. Rows must be in time order."""
    missing = np.nonzero(np.asarray(cols["tid"]) < 0)[0]
    if not len(missing):
        return
    tid = cols["tid"] = np.array(cols["tid"])
    cpu = np.asarray(cols["cpu"])
    sw = np.nonzero(np.asarray(cols["kind"]) == KIND["sched_switch"])[0]
    for c in np.unique(cpu[missing]):
        s = sw[cpu[sw] == c]
        m = missing[cpu[missing] == c]
        k = s.searchsorted(m) - 1       # the last switch on this CPU before the event
        ok = k >= 0
        tid[m[ok]] = np.asarray(cols["tid2"])[s[k[ok]]]


def merge(events_list):
    """Merge Events of several sources (each read with its own src index) by time."""
    names, ids = [], {}
    cols = {k: [] for k in COLUMNS if all(k in ev.cols for ev in events_list)}
    sources, problems, threads = [], [], {}
    for ev in events_list:
        remap = np.array([ids.setdefault(n, len(ids)) for n in ev.names] or [0], np.int32)
        for n in ev.names:
            if n not in names:
                names.append(n)
        for k in cols:
            v = np.asarray(ev.cols[k])
            if k in ("name", "dev"):
                v = np.where(v >= 0, remap[np.maximum(v, 0)], -1).astype(np.int32)
            cols[k].append(v)
        sources += ev.sources
        problems += ev.problems
        for t, v in ev.threads.items():
            threads.setdefault(t, v)
    names = sorted(ids, key=ids.get)
    cat = {k: np.concatenate(v) if v else np.zeros(0, _NP[COLUMNS[k]]) for k, v in cols.items()}
    order = np.argsort(cat["ts"], kind="stable")
    return Events({k: v[order] for k, v in cat.items()}, names, sources, problems, threads)


# ---------------------------------------------------------------- clock marks (make TRACE=clock)
CLOCKMARK_FORMAT = "rpcscope-clockmarks/1"       # rpc/clockmark.h


def read_clockmarks(path):
    """The clock build's marks (rpc/clockmark.c; capture --clock-reads keeps them gzip'd):
    {"names": [mark names], "name": codes into names, "tid", "call_id" (uint64), "ts" (ns) arrays in
    record order, "marks" and "dropped" as the file's header counts them, "torn": lines left out (a
    file cut short)}. TraceError where the file is missing or not a clock-marks file."""
    import gzip
    path = pathlib.Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", errors="replace") as f:
            head = f.readline().split()
            if len(head) != 5 or head[0] != CLOCKMARK_FORMAT or head[1] != "marks" or head[3] != "dropped":
                raise TraceError(f"{path}: not a clock-marks file (first line {' '.join(head)[:80]!r}; "
                                 f"rpc/clockmark.c writes '{CLOCKMARK_FORMAT} marks N dropped N')")
            names, code, tid, cid, ts, torn = {}, array("i"), array("q"), array("Q"), array("q"), 0
            for line in f:
                parts = line.split()
                if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
                    torn += 1
                    continue
                code.append(names.setdefault(parts[0], len(names)))
                tid.append(int(parts[1]))
                cid.append(int(parts[2]))
                ts.append(int(parts[3]))
    except (OSError, EOFError) as e:
        raise TraceError(f"{path}: cannot read the clock marks: {e}") from None
    return {"names": list(names), "name": np.frombuffer(code, np.int32).copy(),
            "tid": np.frombuffer(tid, np.int64).copy(), "call_id": np.frombuffer(cid, np.uint64).copy(),
            "ts": np.frombuffer(ts, np.int64).copy(), "marks": int(head[2]), "dropped": int(head[4]), "torn": torn}
