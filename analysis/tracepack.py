"""Packed traces: a finished run keeps each of its cases' trace directories as one compressed archive.

A case's raw CTF traces (cases/ID/ust/, cases/ID/kernel/, and ust-HOST/, kernel-HOST/ on real hosts)
are the largest part of a run directory once its decoded-trace cache is gone. CTF packs about eight
to one with zstd, so `rpcscope run` ends by packing each trace directory into cases/ID/KIND.tar.zst
and removing the directory (pack). The analysis unpacks a case's archives back into place when it
first looks for that case's traces (unpack, from analysis/run.py), and removes the archive: the case
is then as the capture left it.

Both steps are atomic per trace: an archive is written beside the directory and renamed into place
before the directory goes; an unpack extracts into a temporary directory and renames it into place,
so a reader never sees half a trace and two readers unpacking the same case do not collide.
"""
import dataclasses
import os
import pathlib
import shutil
import subprocess
import time

from rpcscope.output import UserError

SUFFIX = ".tar.zst"
KINDS = ("ust", "kernel")
# zstd level 3 packs this project's CTF traces ~8x at ~170 MB/s on two threads; level 9 packs 7 %
# smaller at a quarter of the speed, level 19 14 % smaller at a hundredth.
ZSTD = ("zstd", "-3", "-T0", "-q")
_TMP = ".tracepack-"                 # prefix of a pack's or an unpack's temporary files and directories


class PackError(UserError):
    """Packing or unpacking a trace failed: one line naming the file and what to do."""


@dataclasses.dataclass
class Packed:
    """What pack() did: trace directories packed, their bytes on disk before and after, and the time."""
    traces: int
    raw_bytes: int
    packed_bytes: int
    seconds: float


def disk_bytes(path):
    """Bytes a file or directory tree takes on disk (its allocated blocks, as du counts them)."""
    path = pathlib.Path(path)
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(f.lstat().st_blocks * 512 for f in [path, *path.rglob("*")])


def _is_trace_name(name):
    return any(name == k or name.startswith(k + "-") for k in KINDS)


def trace_dirs(run_path):
    """Every raw trace directory of the run's cases: cases/ID/KIND and cases/ID/KIND-HOST."""
    cases = pathlib.Path(run_path) / "cases"
    return sorted(d for d in cases.glob("*/*") if d.is_dir() and _is_trace_name(d.name))


def archives(run_path):
    """Every packed trace of the run's cases: cases/ID/KIND.tar.zst and cases/ID/KIND-HOST.tar.zst."""
    cases = pathlib.Path(run_path) / "cases"
    return sorted(a for a in cases.glob(f"*/*{SUFFIX}") if _is_trace_name(a.name[:-len(SUFFIX)]))


def archive_of(trace_dir):
    trace_dir = pathlib.Path(trace_dir)
    return trace_dir.with_name(trace_dir.name + SUFFIX)


def _need_zstd(what):
    if not shutil.which("zstd"):
        raise PackError(f"{what} needs zstd: install it (apt-get install zstd; make bootstrap does)")


def _clean_leftovers(case_dir):
    """A pack's or unpack's temporary files that an interrupt left behind."""
    for p in pathlib.Path(case_dir).glob(_TMP + "*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def pack(run_path):
    """Pack every raw trace directory of the run into its archive and remove the directory; a
    directory whose archive exists already (an earlier pack) is packed again. Returns Packed."""
    t0 = time.monotonic()
    dirs = trace_dirs(run_path)
    if dirs:
        _need_zstd(f"packing the traces of {run_path}")
    raw = packed = 0
    for d in dirs:
        _clean_leftovers(d.parent)
        raw += disk_bytes(d)
        out = archive_of(d)
        tmp = d.parent / f"{_TMP}{d.name}{SUFFIX}"
        p = subprocess.run(["tar", "--use-compress-program", " ".join(ZSTD), "-cf", str(tmp), "-C", str(d.parent),
                            d.name], capture_output=True, text=True)
        if p.returncode != 0:
            tmp.unlink(missing_ok=True)
            why = (p.stderr.strip().splitlines() or [f"tar exit {p.returncode}"])[0]
            raise PackError(f"packing {d} failed ({why}); the trace is left unpacked")
        os.replace(tmp, out)
        gone = d.parent / f"{_TMP}{d.name}"
        os.replace(d, gone)                  # the directory's name is free at once; its removal may be cut short
        shutil.rmtree(gone)
        packed += disk_bytes(out)
    return Packed(len(dirs), raw, packed, round(time.monotonic() - t0, 1))


def unpack(trace_dir):
    """Unpack trace_dir from its archive when the directory is missing and the archive is there, then
    remove the archive. Returns whether it unpacked. Safe against another process doing the same."""
    trace_dir = pathlib.Path(trace_dir)
    arc = archive_of(trace_dir)
    if trace_dir.exists() or not arc.exists():
        return False
    _need_zstd(f"reading {arc}")
    tmp = trace_dir.parent / f"{_TMP}{trace_dir.name}-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        p = subprocess.run(["tar", "--use-compress-program", "zstd -d -q", "-xf", str(arc), "-C", str(tmp)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            if trace_dir.exists():           # another process unpacked it (and removed the archive) meanwhile
                return False
            why = (p.stderr.strip().splitlines() or [f"tar exit {p.returncode}"])[0]
            raise PackError(f"unpacking {arc} failed ({why}): the archive is damaged or cut short and is left as "
                            "it was; this case's traces cannot be read (capture the run again)")
        try:
            os.rename(tmp / trace_dir.name, trace_dir)
        except OSError:
            if trace_dir.exists():           # another process was first
                return False
            raise
        arc.unlink(missing_ok=True)
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unpack_all(run_path):
    """Unpack every packed trace of the run; returns how many."""
    return sum(unpack(a.with_name(a.name[:-len(SUFFIX)])) for a in archives(run_path))


def unpack_case(case_dir, kind):
    """Unpack a case's packed traces of one kind (KIND.tar.zst, KIND-HOST.tar.zst) into place."""
    for a in sorted(pathlib.Path(case_dir).glob(f"{kind}*{SUFFIX}")):
        name = a.name[:-len(SUFFIX)]
        if name == kind or name.startswith(kind + "-"):
            unpack(a.with_name(name))
