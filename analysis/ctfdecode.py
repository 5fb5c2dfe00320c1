"""The event vocabulary, and CTF traces decoded through babeltrace2's Python bindings.

Every event of a trace becomes a row of typed columns (COLUMNS) with one kind (KIND: the kernel's
kinds and every spelling of each come from the step catalog, tracepoints/steps.toml [kernel_events]),
whichever tracer wrote it: perf and tracefs (``net:net_dev_xmit``), LTTng's kernel tracer
(``net_dev_xmit``) or LTTng-UST (``rpcscope:c3_begin``). traceread.py reads traces with the native
extractor where it can and with _decode here where it cannot, salvaging what a damaged trace still
holds; it re-exports the vocabulary.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from array import array

import numpy as np

from rpcscope.tracepoints import KERNEL_EVENTS, KERNEL_SYSCALLS

from . import native


class TraceError(Exception):
    """A trace that cannot be read at all (missing, not CTF)."""


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


