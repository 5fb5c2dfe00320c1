"""The ftrace kernel collector: a tracefs instance of rpcscope's own, its ring buffer read raw and
written as CTF in perf's dialect, so that the analysis reads it as it reads perf's.

Why: on this VM a recorded perf event costs the thread that hits it ~970 ns, an ftrace event ~120
ns (`rpcscope bench event-cost`, collectors/README.md), and the probe correction's error grows with the
probe effect it removes. The events and their filters are perf's (collectors/perf.py event_set,
event_filter: tracefs filters either way), the clock is CLOCK_MONOTONIC (trace_clock mono, as
`perf record -k mono` and LTTng-UST).

    rec = FtraceRecorder(events, devices); rec.start()      # the instance, disabled
    rec.enable(); ...run...; rec.disable()                  # (or resume()/pause() around turns)
    raw = rec.dump(dest)                                    # the ring, per CPU, into dest/
    rec.stop()                                              # the instance removed
    counts = convert_to_ctf(raw, ctf_dir)                   # {event: n}, lost

A paused instance whose events stay enabled still costs every thread that hits one of them: the
kernel fills the event into a per-CPU scratch buffer and runs its filter before it finds the ring
switched off. An instance made with events_off_while_paused=True has its events enabled only while it
records (resume(), pause()), so runs beside its paused turns hit no probe of it at all.

The raw dump is what per_cpu/cpuN/trace_pipe_raw hands out: the ring buffer's pages (a u64
timestamp, a commit word whose top bits flag missed events, then events of a 32-bit header
type_len:5 time_delta:27; include/linux/ring_buffer.h, kernel/trace/ring_buffer.c), with the
event formats (events/*/*/format) and the thread-group ids (saved_tgids) saved beside them.
"""
import json
import os
import pathlib
import re
import struct
import time
import uuid as uuidlib

from rpcscope.output import UserError

from . import leftovers, perf

TRACEFS = perf.TRACEFS
# Ring buffer per CPU: 256 MiB holds a traced run of ~1 M events (about 40 bytes an event) without
# overwriting; a run that overflows it is lossy, and said so (lost events counted per page).
BUFFER_KB = 262144
RB_MISSED_EVENTS = 1 << 31
RB_MISSED_STORED = 1 << 30
PADDING, TIME_EXTEND, TIME_STAMP = 29, 30, 31
COMMON = ("common_type", "common_flags", "common_preempt_count", "common_pid")


def available():
    return (TRACEFS / "instances").is_dir()


def _write(path, text):
    try:
        pathlib.Path(path).write_text(text)
    except OSError as e:
        raise UserError(f"ftrace: writing {text.strip()[:80]!r} to {path} failed: {e.strerror}") from None


def require():
    """A UserError saying how to get tracefs instances, where there are none."""
    if not available():
        raise UserError(f"ftrace: {TRACEFS}/instances is not there; mount tracefs with "
                        f"`mount -t tracefs nodev {TRACEFS}` (make bootstrap does), or use --kernel perf")


class FtraceRecorder:
    """A tracefs instance with the capture's events enabled and filtered; see the module docstring."""

    def __init__(self, events, devices, procnames=perf.PROCNAMES, buffer_kb=BUFFER_KB, name=None, record_tgid=True,
                 events_off_while_paused=False):
        self.events = list(events)
        self.events_off_while_paused = events_off_while_paused
        self.devices = devices
        self.procnames = procnames
        self.buffer_kb = buffer_kb
        self.record_tgid = record_tgid       # thread-group ids for the CTF's perf_pid (dump's tgids.json)
        self.name = name or f"rpcscope-{os.getpid()}-{int(time.monotonic() * 1000) % 1_000_000}"
        self.path = TRACEFS / "instances" / self.name

    def start(self):
        require()
        leftovers.note("tracefs_instances", self.name)       # before it exists: a kill leaves it recorded
        try:
            self.path.mkdir()
        except OSError as e:
            raise UserError(f"ftrace: cannot create the tracefs instance {self.path}: {e.strerror}") from None
        try:
            _write(self.path / "tracing_on", "0")
            _write(self.path / "trace_clock", "mono")
            _write(self.path / "buffer_size_kb", str(self.buffer_kb))
            if self.record_tgid and (self.path / "options" / "record-tgid").exists():
                _write(self.path / "options" / "record-tgid", "1")
            for ev in self.events:
                d = self._event_dir(ev)
                flt = perf.event_filter(ev, self.procnames, self.devices)
                if flt:
                    _write(d / "filter", flt)
                if not self.events_off_while_paused:
                    _write(d / "enable", "1")
        except BaseException:
            self.stop()
            raise

    def _event_dir(self, ev):
        return self.path / "events" / ev.replace(":", "/")

    def enable(self):
        _write(self.path / "trace", "")                      # empties the ring
        _write(self.path / "tracing_on", "1")

    def disable(self):
        _write(self.path / "tracing_on", "0")

    def resume(self):
        """Record again, the ring kept (a traced run's turn, collectors/sweeps.py turns_round): enable()
        less the emptying, the events enabled first where they are off while paused."""
        if self.events_off_while_paused:
            self._set_events("1")
        _write(self.path / "tracing_on", "1")

    def pause(self):
        """Stop recording, the ring kept; the events disabled where they are off while paused."""
        _write(self.path / "tracing_on", "0")
        if self.events_off_while_paused:
            self._set_events("0")

    def _set_events(self, value):
        for ev in self.events:
            _write(self._event_dir(ev) / "enable", value)

    def written(self):
        """Events the ring took since enable(): entries still there plus those overwritten."""
        return sum(st.get("entries", 0) + st.get("overrun", 0)
                   for st in (_stats(d / "stats") for d in (self.path / "per_cpu").glob("cpu*")))

    def dump(self, dest):
        """The ring's pages per CPU into dest/cpuN.raw (consumed: the ring is empty after), the
        event formats into dest/formats.json and the thread-group ids into dest/tgids.json."""
        dest = pathlib.Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        stats = {}
        for cpu_dir in sorted((self.path / "per_cpu").glob("cpu*"), key=lambda p: int(p.name[3:])):
            stats[cpu_dir.name] = _stats(cpu_dir / "stats")
            with open(cpu_dir / "trace_pipe_raw", "rb", buffering=0) as src, \
                    open(dest / f"{cpu_dir.name}.raw", "wb") as out:
                os.set_blocking(src.fileno(), False)
                while True:
                    try:
                        page = src.read(PAGE_SIZE)
                    except BlockingIOError:
                        break
                    if not page:
                        break
                    out.write(page.ljust(PAGE_SIZE, b"\0"))
        formats = {ev: event_format(ev) for ev in self.events}
        (dest / "formats.json").write_text(json.dumps(formats))
        (dest / "tgids.json").write_text(json.dumps(_tgids()))
        (dest / "stats.json").write_text(json.dumps(stats))
        return dest

    def stop(self):
        """Disable the events and remove the instance (also after a failed start); idempotent."""
        if not self.path.exists():
            leftovers.forget("tracefs_instances", self.name)
            return
        try:
            _write(self.path / "tracing_on", "0")
        except UserError:
            pass
        for ev in self.events:
            try:
                (self._event_dir(ev) / "enable").write_text("0")
            except OSError:
                pass
        for _ in range(50):                                   # busy while a reader still holds it
            try:
                self.path.rmdir()
                leftovers.forget("tracefs_instances", self.name)
                return
            except OSError:
                time.sleep(0.1)
        raise UserError(f"ftrace: could not remove the tracefs instance {self.path}; "
                        f"remove it with `rmdir {self.path}`")

    kill = stop


PAGE_SIZE = os.sysconf("SC_PAGESIZE")


def _stats(path):
    out = {}
    try:
        for line in pathlib.Path(path).read_text().splitlines():
            k, _, v = line.partition(":")
            v = v.strip().split()
            if v and re.fullmatch(r"\d+", v[0]):
                out[k.strip()] = int(v[0])
    except OSError:
        pass
    return out


def _tgids():
    out = {}
    try:
        for line in (TRACEFS / "saved_tgids").read_text().splitlines():
            p = line.split()
            if len(p) == 2:
                out[p[0]] = int(p[1])
    except OSError:
        pass
    return out


def _tgid_now(tid):
    """The thread group of a thread saved_tgids did not know (one never switched while the instance
    recorded, a kernel thread often): from /proc while it lives, else -1 (unknown)."""
    if tid == 0:
        return 0
    try:
        m = re.search(r"^Tgid:\s*(\d+)", pathlib.Path(f"/proc/{tid}/status").read_text(), re.M)
        return int(m.group(1)) if m else -1
    except OSError:
        return -1


FIELD_RE = re.compile(r"field:(?P<decl>[^;]+);\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);\s*signed:(?P<signed>\d)")


def event_format(ev):
    """{"id", "fields": [[name, kind, offset, size, signed]]} of a tracepoint, kind "int", "str"
    (a char array) or "loc" (a __data_loc string); other arrays are left out."""
    sub, name = ev.split(":", 1)
    try:
        text = (TRACEFS / "events" / sub / name / "format").read_text()
    except OSError as e:
        raise UserError(f"ftrace: cannot read the format of {ev}: {e.strerror}") from None
    fid = int(re.search(r"^ID:\s*(\d+)", text, re.M).group(1))
    fields = []
    for m in FIELD_RE.finditer(text):
        decl = m.group("decl").strip()
        off, size, signed = int(m.group("off")), int(m.group("size")), int(m.group("signed"))
        fname = re.sub(r"\[.*\]$", "", decl.split()[-1])
        if fname in COMMON:
            continue
        if decl.startswith("__data_loc") and "char" in decl:
            fields.append([fname, "loc", off, size, 0])
        elif "[" in decl:
            if re.match(r"(const\s+)?(unsigned\s+)?char\b", decl):
                fields.append([fname, "str", off, size, 0])
        elif size in (1, 2, 4, 8):
            fields.append([fname, "int", off, size, signed])
    return {"id": fid, "fields": fields}


# ---------------------------------------------------------------- reading the ring's pages

def parse_cpu(data, formats_by_id):
    """(events, lost, pages_with_losses) of one CPU's raw dump: events as (ts, id, data bytes),
    lost the events the ring reported missing (overwritten or dropped)."""
    events, lost, where = [], 0, []
    for p in range(0, len(data) - 15, PAGE_SIZE):
        ts = struct.unpack_from("<Q", data, p)[0]
        commit = struct.unpack_from("<q", data, p + 8)[0] & 0xFFFFFFFF
        size = commit & ~(RB_MISSED_EVENTS | RB_MISSED_STORED)
        if commit & RB_MISSED_EVENTS:
            missed = 1
            if commit & RB_MISSED_STORED and p + 16 + size + 8 <= len(data):
                missed = struct.unpack_from("<Q", data, p + 16 + size)[0] or 1
            lost += missed
            where.append((len(events), missed))
        i, end = p + 16, min(p + 16 + min(size, PAGE_SIZE - 16), len(data))
        while i + 8 <= end:                                   # every event but the page's end mark is >= 8 bytes
            hdr = struct.unpack_from("<I", data, i)[0]
            tlen, delta = hdr & 0x1F, hdr >> 5
            if tlen == PADDING:
                if delta == 0:
                    break
                i += 4 + struct.unpack_from("<I", data, i + 4)[0]
                continue
            if tlen == TIME_EXTEND:
                ts += (struct.unpack_from("<I", data, i + 4)[0] << 27) + delta
                i += 8
                continue
            if tlen == TIME_STAMP:
                abs_ts = (struct.unpack_from("<I", data, i + 4)[0] << 27) | delta
                ts = (ts & ~((1 << 59) - 1)) | abs_ts
                i += 8
                continue
            ts += delta
            if tlen == 0:
                length = struct.unpack_from("<I", data, i + 4)[0] - 4
                body = i + 8
            else:
                length = tlen * 4
                body = i + 4
            if body + length > end:
                break                                         # a length past the page: a damaged page
            if length >= 8:
                etype = struct.unpack_from("<H", data, body)[0]
                if etype in formats_by_id:
                    events.append((ts, etype, data[body:body + length]))
            i = body + length
    return events, lost, where


# ---------------------------------------------------------------- CTF in perf's dialect

_INT = 'integer {{ size = {bits}; align = 8; signed = {signed}; encoding = none; base = decimal; byte_order = le; }}'
_STR = "string { encoding = UTF8; }"
PACKET_EVENTS = 20000


def _metadata(trace_uuid, classes):
    out = ["/* CTF 1.8 */", "", "trace {", "\tmajor = 1;", "\tminor = 8;", f'\tuuid = "{trace_uuid}";',
           "\tbyte_order = le;", "\tpacket.header := struct {",
           f"\t\t{_INT.format(bits=32, signed='false')} magic;",
           f"\t\t{_INT.format(bits=8, signed='false')} uuid[16];",
           f"\t\t{_INT.format(bits=32, signed='false')} stream_id;", "\t} align(8);", "};", "",
           "env {", '\tdomain = "kernel";', '\ttracer_name = "ftrace";', f'\tsysname = "{os.uname().sysname}";',
           f'\trelease = "{os.uname().release}";', "};", "",
           # CLOCK_MONOTONIC ns (trace_clock mono); capture gives it the UST clock's UUID and offset.
           "clock {", "\tname = ftrace_mono;", f'\tuuid = "{uuidlib.uuid4()}";', '\tdescription = "trace_clock mono";',
           "\tfreq = 1000000000;", "\tprecision = 10;", "\toffset_s = 0;", "\toffset = 0;", "\tabsolute = FALSE;",
           "};", "", "stream {", "\tid = 0;", "\tevent.header := struct {",
           f"\t\t{_INT.format(bits=32, signed='false')} id;",
           "\t\t" + _INT.format(bits=64, signed='false')[:-2] + " map = clock.ftrace_mono.value; } timestamp;",
           "\t} align(8);", "", "\tpacket.context := struct {"]
    for f in ("timestamp_begin", "timestamp_end", "content_size", "packet_size", "events_discarded"):
        out.append(f"\t\t{_INT.format(bits=64, signed='false')} {f};")
    out += [f"\t\t{_INT.format(bits=32, signed='false')} cpu_id;", "\t} align(8);", "};", ""]
    for cid, (name, fields) in enumerate(classes):
        out += ["event {", f"\tid = {cid};", f'\tname = "{name}";', "\tstream_id = 0;", "\tfields := struct {",
                f"\t\t{_INT.format(bits=32, signed='true')} perf_tid;",
                f"\t\t{_INT.format(bits=32, signed='true')} perf_pid;"]
        for fname, kind, _off, size, signed in fields:
            decl = _STR if kind != "int" else _INT.format(bits=size * 8, signed="true" if signed else "false")
            out.append(f"\t\t{decl} {fname};")
        out += ["\t} align(8);", "};", ""]
    return "\n".join(out) + "\n"


def _encoder(fields):
    """A function: event data bytes -> the CTF payload after perf_tid/perf_pid."""
    parts = []
    for _name, kind, off, size, signed in fields:
        if kind == "int":
            code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
            parts.append(("int", off, "<" + (code if signed else code.upper())))
        else:
            parts.append((kind, off, size))

    def enc(d):
        out = []
        for p in parts:
            if p[0] == "int":
                out.append(struct.pack(p[2], struct.unpack_from(p[2], d, p[1])[0]))
            elif p[0] == "str":
                out.append(d[p[1]:p[1] + p[2]].split(b"\0", 1)[0] + b"\0")
            else:
                loc = struct.unpack_from("<I", d, p[1])[0]
                o, n = loc & 0xFFFF, loc >> 16
                out.append(d[o:o + n].split(b"\0", 1)[0] + b"\0")
        return b"".join(out)
    return enc


def convert_to_ctf(raw_dir, ctf_dir):
    """Write raw_dir's dump (FtraceRecorder.dump) as CTF into ctf_dir; returns ({event: n}, lost)."""
    raw_dir, ctf_dir = pathlib.Path(raw_dir), pathlib.Path(ctf_dir)
    try:
        formats = json.loads((raw_dir / "formats.json").read_text())
        tgids = {int(k): v for k, v in json.loads((raw_dir / "tgids.json").read_text()).items()}
    except (OSError, ValueError) as e:
        raise UserError(f"ftrace: {raw_dir} holds no complete dump ({e}); capture it again") from None
    names = sorted(formats)
    by_id = {formats[n]["id"]: (k, n) for k, n in enumerate(names)}
    enc = {k: _encoder(formats[n]["fields"]) for k, n in enumerate(names)}
    trace_uuid = uuidlib.uuid4()
    ctf_dir.mkdir(parents=True, exist_ok=True)
    (ctf_dir / "metadata").write_text(_metadata(trace_uuid, [(n, formats[n]["fields"]) for n in names]))
    counts, lost_total = {n: 0 for n in names}, 0
    header = struct.pack("<I", 0xC1FC1FC1) + trace_uuid.bytes + struct.pack("<I", 0)
    for raw in sorted(raw_dir.glob("cpu*.raw"), key=lambda p: int(p.stem[3:])):
        cpu = int(raw.stem[3:])
        data = raw.read_bytes()
        if len(data) % PAGE_SIZE:
            raise UserError(f"ftrace: {raw} is cut short ({len(data)} bytes, not whole {PAGE_SIZE}-byte pages): "
                            f"its dump was interrupted; capture again")
        events, lost, where = parse_cpu(data, by_id)
        lost_total += lost
        # A packet ends where the ring reported missed events, so that the discarded count lands
        # between the events around the gap.
        cuts = sorted({0, len(events), *(w for w, _ in where), *range(0, len(events), PACKET_EVENTS)})
        missed_at = {}
        for w, m in where:
            missed_at[w] = missed_at.get(w, 0) + m
        discarded = 0
        with open(ctf_dir / f"ftrace_stream_{cpu}", "wb") as out:
            for a, b in zip(cuts, cuts[1:] or [len(events)]):
                discarded += missed_at.get(a, 0)
                if b <= a:
                    continue
                body = []
                for ts, etype, d in events[a:b]:
                    k, n = by_id[etype]
                    counts[n] += 1
                    tid = struct.unpack_from("<i", d, 4)[0]
                    if tid not in tgids:
                        tgids[tid] = _tgid_now(tid)
                    body.append(struct.pack("<IQii", k, ts, tid, tgids[tid]) + enc[k](d))
                payload = b"".join(body)
                size_bits = (len(header) + 44 + len(payload)) * 8
                ctx = struct.pack("<QQQQQI", events[a][0], events[b - 1][0], size_bits, size_bits, discarded, cpu)
                out.write(header + ctx + payload)
    return counts, lost_total
