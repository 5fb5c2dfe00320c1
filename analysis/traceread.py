"""Reading traces: the one way into a trace for the rest of rpcscope (with ctfdecode.py, its decoder
through babeltrace2's bindings, and the native extractor, native.py).

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
                    comparable one on one host). The offset is in
                    sources[].clock.offset_ns; a case's traces of several hosts
                    are put on one clock by timeline.py (StoredTrace.on_clock).
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
import copy
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import threading
from array import array

import numpy as np

from . import native
from .ctfdecode import (  # noqa: F401  (the vocabulary, re-exported: the analysis reads it from here)
    _NP,
    COLUMNS,
    KIND,
    KIND_NAME,
    NET_RX_VEC,
    TraceError,
    _Builder,
    _decode,
    _salvage,
    _stream_files,
    metadata_error,
    normalise,
)

READER_VERSION = 1

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
        self.clock = None           # a timeline.ClockMap: ts read are mapped onto another host's clock

    def __len__(self):
        return self.n

    def on_clock(self, clock):
        """The same trace with its timestamps mapped by clock (timeline.ClockMap: raw -> the case's
        reference clock, a monotonic map); itself where the map is the identity."""
        if clock is None or clock.identity:
            return self
        other = copy.copy(self)
        other.clock = clock
        return other

    def span(self, lo=None, hi=None, columns=None):
        """Events with lo <= ts <= hi (None: that end open; on the mapped clock with on_clock); columns:
        only those (ts always)."""
        if not self.n:
            return self._rows(0, 0, columns)
        raw_lo, raw_hi = lo, hi
        if self.clock is not None:      # the raw range, a few ns wider (the maps round), then cut exactly
            raw_lo = None if lo is None else self.clock.backward(lo) - 2
            raw_hi = None if hi is None else self.clock.backward(hi) + 2
        ts = self._ev.cols["ts"] if self._ev is not None else np.memmap(self.dir / "ts.bin", np.int64, mode="r")
        i = 0 if raw_lo is None else int(ts.searchsorted(raw_lo, "left"))
        j = self.n if raw_hi is None else int(ts.searchsorted(raw_hi, "right"))
        del ts                      # unmaps: only the pages of the binary search were touched
        ev = self._rows(i, max(i, j), columns)
        if self.clock is not None and (lo is not None or hi is not None) and len(ev):
            t = ev.cols["ts"]
            ev = ev.select((t >= (lo if lo is not None else t[0])) & (t <= (hi if hi is not None else t[-1])))
        return ev

    def chunks(self, size=1 << 20, columns=None):
        """The whole trace as Events of at most `size` rows each, in time order."""
        for i in range(0, self.n, size):
            yield self._rows(i, min(i + size, self.n), columns)

    def _rows(self, i, j, columns=None):
        keys = [k for k in COLUMNS if columns is None or k == "ts" or k in columns]
        if self._ev is not None:
            return self._mapped({k: self._ev.cols[k][i:j] for k in keys})
        cols = {}
        for k in keys:
            dt = np.dtype(_NP[COLUMNS[k]])
            cols[k] = np.fromfile(self.dir / f"{k}.bin", dtype=dt, count=j - i, offset=i * dt.itemsize)
        if self.src and "src" in cols:
            cols["src"][:] = self.src
        return self._mapped(cols)

    def _mapped(self, cols):
        if self.clock is not None:
            cols["ts"] = self.clock.forward(cols["ts"])
            if "cpu" in cols:
                cols["cpu"] = self.clock.cpus(cols["cpu"])
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
