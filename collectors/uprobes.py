"""User-space probes at functions of an unmodified target (`rpcscope run --target X --uprobe SYMBOL[:STEP]`):
an entry and a return probe per function, made with `perf probe -x`, recorded by the target capture's
pid-filtered tracefs instance beside its kernel events (collectors/target.py).

SYMBOL is a function of the target's client or server program or of a library they load: a C name
(peer_echo_1, svc_getreq_common, xdr_bytes), a mangled C++ name, or a demangled one without its
parameters (rpcspeer::Peer::Stub::Echo). STEP names what its time stands for (default: the symbol).

    probes = resolve(["peer_echo_1:call", "rpcspeer_prog_1:dispatch"], binaries)
    with Uprobes(probes) as up:          # perf probe -x ... -a; removed again at the end
        events = up.events               # tracefs names, entry and return of each
"""
import dataclasses
import os
import re
import shutil
import subprocess

from rpcscope.output import UserError

SPEC = re.compile(r"^(?P<sym>.*[^:]):(?P<step>[A-Za-z][A-Za-z0-9_'.-]*)$")


@dataclasses.dataclass(frozen=True)
class Probe:
    """One probed function: where it is, what its time is called, and its tracefs event names."""
    symbol: str          # as the binary names it (mangled for C++)
    shown: str           # as the user gave it
    step: str
    binary: str
    event: str           # "GROUP:NAME" (entry); the return is event + "__return"

    @property
    def ret_event(self):
        return self.event + "__return"


def parse_spec(spec):
    """'SYMBOL[:STEP]' -> (symbol, step)."""
    spec = spec.strip()
    m = SPEC.match(spec)
    sym, step = (m.group("sym"), m.group("step")) if m else (spec, "")
    if not sym or sym != sym.strip():
        raise UserError(f"--uprobe {spec!r}: give SYMBOL[:STEP], e.g. peer_echo_1:call or svc_getreq_common")
    # A demangled C++ name may hold spaces ("(anonymous namespace)::peer_call"); the default step is its
    # last component without a parameter list.
    return sym, step or re.sub(r"\W+", "_", re.sub(r"\(.*\)$", "", sym).split("::")[-1])


def libraries(binary):
    """The shared libraries a binary loads (ldd), absolute paths."""
    try:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [m.group(1) for m in re.finditer(r"=>\s+(/\S+)", out)]


def _functions(binary):
    """[(mangled, demangled)] of the functions a binary defines (its symbol table, else its dynamic one)."""
    out = []
    for extra in ([], ["-D"]):
        try:
            raw = subprocess.run(["nm", "--defined-only", *extra, binary], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()
            dem = subprocess.run(["nm", "--defined-only", "-C", *extra, binary], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()
        except (OSError, subprocess.TimeoutExpired):
            continue
        for a, b in zip(raw, dem):
            pa, pb = a.split(None, 2), b.split(None, 2)
            if len(pa) == 3 and len(pb) == 3 and pa[1] in "TtWw":
                out.append((pa[2], pb[2]))
        if out:
            break
    return out


def resolve(specs, binaries):
    """The Probes of the --uprobe specs, each function looked up in the binaries and their libraries;
    UserError naming a symbol found nowhere."""
    if not specs:
        return []
    for tool in ("perf", "nm", "ldd"):
        if not shutil.which(tool):
            raise UserError(f"--uprobe needs '{tool}' on PATH (perf: linux-perf; nm: binutils; ldd: libc-bin)")
    files = []
    for b in binaries:
        for f in [str(b), *libraries(b)]:
            if f not in files:
                files.append(f)
    tables = {}
    group = f"rpcscope_u{os.getpid()}"
    probes = []
    for k, spec in enumerate(specs):
        sym, step = parse_spec(spec)
        found = None
        for f in files:
            if f not in tables:
                tables[f] = _functions(f)
            for mangled, demangled in tables[f]:
                if mangled == sym or demangled == sym or demangled.startswith(sym + "("):
                    if not mangled.endswith(".cold"):
                        found = (f, mangled)
                        break
            if found:
                break
        if not found:
            raise UserError(f"--uprobe {spec!r}: no function {sym!r} in {', '.join(map(str, binaries))} or the "
                            f"{len(files) - len(binaries)} libraries they load (as nm lists them)")
        probes.append(Probe(symbol=found[1], shown=sym, step=step, binary=found[0], event=f"{group}:u{k}"))
    return probes


class Uprobes:
    """The probes made with perf probe for a `with` block, removed at its end however it ends."""

    def __init__(self, probes):
        self.probes = probes
        self.made = []

    @property
    def events(self):
        return [e for p in self.probes for e in (p.event, p.ret_event)]

    def __enter__(self):
        try:
            for p in self.probes:
                for suffix in ("", "%return"):
                    argv = ["perf", "probe", "--no-demangle", "-q", "-x", p.binary, "-a",
                            f"{p.event}={p.symbol}{suffix}"]
                    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
                    if r.returncode:
                        raise UserError(f"perf probe -x {p.binary} {p.symbol}{suffix} failed: "
                                        f"{(r.stderr or r.stdout).strip().splitlines()[-1:]}")
                    self.made.append(p.event + ("__return" if suffix else ""))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self):
        for ev in self.made:
            subprocess.run(["perf", "probe", "-q", "-d", ev], capture_output=True, text=True, timeout=120)
        self.made = []

    def __exit__(self, *exc):
        self.remove()
        return False

    def record(self):
        return [dataclasses.asdict(p) for p in self.probes]
