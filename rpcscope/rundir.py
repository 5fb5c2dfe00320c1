"""The run directory's contract: every path in it, the manifest's shape and version, the outputs' formats.

A run directory is written by the collectors (`rpcscope capture`), read by the analysis, which
writes its outputs under analysis/, and the reports read the outputs only. This module is the one
place that names its files; the layers below it import nothing of the project.

    rd = RunDir("runs/NAME")
    rd.manifest_path, rd.case_dir("udp-null-0"), rd.steps_json, rd.rtp_json, rd.model_json("udp")
    man = rd.load_manifest()          # Manifest, or ManifestError with one line naming what is wrong
    man.cases[0].untraced_p50, man.testbed.link.mtu, man.raw["calibration"]

Layout (format 1):

    manifest.json                   the capture's record (Manifest), rewritten as each case completes
    capture-state.json              what a running capture started (collectors/leftovers.py); gone at its end
    cases/ID/                       one case (CaseRecord.dir): ust/, kernel/, client-*.json, rounds.json,
                                    clock-client.txt.gz, clock-server.txt.gz, server-*.log; on real hosts
                                    ust-HOST/, kernel-HOST/, host-HOST.json, and the manifest's
                                    cases[].clock_check: an SSH timestamp exchange with every host before
                                    and after the case (collectors/clockcheck.py)
    analysis/steps.json, steps.csv, rtt.csv   `rpcscope analyze`
    analysis/rpcs.jsonl.gz          every RPC's time in each step and row (`rpcscope analyze`; RPCS_FORMAT)
    analysis/probe.json             the in-situ probe calibration (analysis/probe.py)
    analysis/rtp.json               the round-trip path (`rpcscope rtp`)
    analysis/model-TRANSPORT.json   the RTT model of one transport (`rpcscope model`)
    analysis/verify-TRANSPORT.json  a prediction set beside this run's measurement (`rpcscope verify`)
    analysis/cache/                 decoded trace columns
    kernelonly/                     with capture --turns --kernel-only-runs: the untraced build's runs
                                    recorded from kernel events alone, a target run of its own (below),
                                    one case a round (TRANSPORT-PROC-SIZE-rN) of the rounds the traced
                                    runs took turns in (`rpcscope crosscheck RUN`)
    kernelonly-traced/              with --kernel-only-traced-runs, the same for the traced build, its user
                                    tracepoints recording: the same kernel events with and without them
                                    (`rpcscope crosscheck RUN` sets the two builds' steps side by side)
    kernelonly-doubled/             with --kernel-only-doubled-runs, the untraced build's runs again, each
                                    kernel event recorded twice: where one more recording of the kernel
                                    events lands (`rpcscope crosscheck RUN`, column kernel +)
    report/index.html, report.md    `rpcscope report`

A run of an RPC rpcscope did not write (`rpcscope run --target`, rpcscope/target_run.py) has no manifest:

    target.json                     what was run (TARGET_FORMAT): the target, procedure, calls, uprobes, cases
    cases/ID/                       programs/, net/ (tracefs dumps, their events decoded: events.jsonl.gz),
                                    sockets.json, program.json, program-untraced-N.json, case.json,
                                    uprobes.json (collectors/target.py)
    analysis/kernelonly.json        step tables, matching and the probe calibration per case (KERNELONLY_FORMAT)
    analysis/kernelonly-calls.csv   every matched call's path K1..K11 (and KC1, KC2 with a call probe)
    analysis/targetmodel-T.json     the model of transport T (analysis/targetmodel.py)
    report/first-screen.txt         the first screens
"""
import dataclasses
import json
import math
import pathlib
import statistics

# The manifest's format: a whole number, raised when its shape changes in a way a reader must know.
MANIFEST_FORMAT = 1
SUPPORTED_MANIFEST_FORMATS = (1,)

# The outputs' identities: each file's "format" field.
ROUNDS_FORMAT = "rpcscope-rounds/1"          # cases/ID/rounds.json
RTP_FORMAT = "rpcscope-rtp/1"                # analysis/rtp.json
PROBE_FORMAT = "rpcscope-probe/20"           # analysis/probe.json
MODEL_FORMAT = "rpcscope-model/2"            # analysis/model-TRANSPORT.json
RPCS_FORMAT = "rpcscope-rpcs/1"              # analysis/rpcs.jsonl.gz (its first line)
PREDICTION_FORMAT = "rpcscope-prediction/1"  # `rpcscope whatif --out`
VERIFY_FORMAT = "rpcscope-verify/1"          # analysis/verify-TRANSPORT.json
CLOCKMARK_FORMAT = "rpcscope-clockmarks/1"   # cases/ID/clock-ROLE.txt.gz (rpc/clockmark.h)

MANIFEST = "manifest.json"
CAPTURE_STATE = "capture-state.json"
CASES = "cases"
ANALYSIS = "analysis"
REPORT = "report"
# The analysis's outputs, in analysis/.
STEPS_JSON = "steps.json"
STEPS_CSV = "steps.csv"
RTT_CSV = "rtt.csv"
RPCS_TABLE = "rpcs.jsonl.gz"
PROBE_JSON = "probe.json"
RTP_JSON = "rtp.json"
# A target's run (rpcscope run --target).
TARGET_JSON = "target.json"
TARGET_FORMAT = "rpcscope-target/1"
TARGET_CASE_JSON = "case.json"               # in cases/ID/: the case and the client's own figures
TARGET_EVENTS = "events.jsonl.gz"            # in cases/ID/programs/ and net/: the decoded kernel events
TARGET_EVENT_CPU = "_cpu"                     # the field of a decoded event that holds the CPU that recorded it
KERNELONLY_JSON = "kernelonly.json"          # in analysis/
KERNELONLY_CSV = "kernelonly-calls.csv"      # in analysis/
KERNELONLY_FORMAT = "rpcscope-kernelonly/1"
FIRST_SCREEN_TXT = "first-screen.txt"        # in report/
KERNEL_ONLY_RUN = "kernelonly"               # a capture's kernel-only runs (capture --kernel-only-runs)
KERNEL_ONLY_TRACED_RUN = "kernelonly-traced"  # ... of its traced build, its user tracepoints recording
KERNEL_ONLY_DOUBLED_RUN = "kernelonly-doubled"  # ... of the untraced build, every kernel event recorded twice
KERNEL_ONLY_RUNS = (KERNEL_ONLY_RUN, KERNEL_ONLY_TRACED_RUN, KERNEL_ONLY_DOUBLED_RUN)


def model_name(transport):
    """The model file of one transport, in analysis/."""
    return f"model-{transport}.json"


def verify_name(transport):
    """The verification file of one transport, in analysis/."""
    return f"verify-{transport}.json"


class ManifestError(Exception):
    """A directory that is not a run, or whose manifest is unreadable, of the wrong shape or an
    unsupported format: one line naming the file, what is wrong and what to do."""


class RunDir:
    """The paths of one run directory."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __repr__(self):
        return f"RunDir({str(self.path)!r})"

    # the capture's
    @property
    def manifest_path(self):
        return self.path / MANIFEST

    @property
    def capture_state(self):
        return self.path / CAPTURE_STATE

    @property
    def cases_dir(self):
        return self.path / CASES

    def case_dir(self, case_id):
        return self.cases_dir / case_id

    @staticmethod
    def case_rel(case_id):
        """A case's directory as the manifest records it (cases[].dir), relative to the run."""
        return f"{CASES}/{case_id}"

    # the analysis's
    @property
    def analysis(self):
        return self.path / ANALYSIS

    @property
    def cache(self):
        return self.analysis / "cache"

    @property
    def steps_json(self):
        return self.analysis / STEPS_JSON

    @property
    def steps_csv(self):
        return self.analysis / STEPS_CSV

    @property
    def rtt_csv(self):
        return self.analysis / RTT_CSV

    @property
    def rpcs_table(self):
        return self.analysis / RPCS_TABLE

    @property
    def probe_json(self):
        return self.analysis / PROBE_JSON

    @property
    def rtp_json(self):
        return self.analysis / RTP_JSON

    def model_json(self, transport):
        return self.analysis / model_name(transport)

    def model_jsons(self):
        """The model files there are, in name order."""
        return sorted(self.analysis.glob(model_name("*")))

    def verify_json(self, transport):
        return self.analysis / verify_name(transport)

    def verify_jsons(self):
        """The verification files there are, in name order."""
        return sorted(self.analysis.glob(verify_name("*")))

    # a target's run
    @property
    def target_json(self):
        return self.path / TARGET_JSON

    @property
    def is_target(self):
        """Whether this is a run of an RPC rpcscope did not write (`rpcscope run --target`)."""
        return self.target_json.exists()

    @property
    def kernel_only_run(self):
        """The target run of a capture's kernel-only runs (capture --turns --kernel-only-runs)."""
        return self.path / KERNEL_ONLY_RUN

    def kernel_only_runs(self):
        """The capture's kernel-only target runs of every kind (KERNEL_ONLY_RUNS), there or not."""
        return [self.path / kind for kind in KERNEL_ONLY_RUNS]

    @property
    def kernelonly_json(self):
        return self.analysis / KERNELONLY_JSON

    @property
    def kernelonly_csv(self):
        return self.analysis / KERNELONLY_CSV

    @property
    def first_screen_txt(self):
        return self.report / FIRST_SCREEN_TXT

    # the report's
    @property
    def report(self):
        return self.path / REPORT

    @property
    def report_html(self):
        return self.report / "index.html"

    # the manifest
    def write_manifest(self, manifest):
        """Write the manifest (a dict) whole, through a temporary file: a reader never sees half of it."""
        tmp = self.path / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        tmp.replace(self.manifest_path)

    def read_manifest(self):
        """The manifest as checked JSON (a dict): ManifestError when there is none, it is unreadable, of
        the wrong shape or of a format this version does not read."""
        mf = self.manifest_path
        try:
            m = json.loads(mf.read_text())
        except FileNotFoundError:
            raise ManifestError(f"{self.path} is not a run directory: no {MANIFEST} "
                                f"(make one with `rpcscope capture --out {self.path}`)") from None
        except (OSError, ValueError) as e:
            raise ManifestError(f"{mf}: unreadable manifest: {e}") from None
        problem = manifest_problem(m)
        if problem:
            raise ManifestError(f"{mf}: a damaged manifest: {problem}; re-capture the run "
                                f"(`rpcscope capture --out {self.path} --replace`) or restore its {MANIFEST}")
        if m.get("format") not in SUPPORTED_MANIFEST_FORMATS:
            raise ManifestError(f"{mf}: manifest format {m.get('format')!r}, this rpcscope reads format "
                                f"{', '.join(map(str, SUPPORTED_MANIFEST_FORMATS))}; re-capture the run "
                                f"(`rpcscope capture --out {self.path} --replace`)")
        return m

    def load_manifest(self):
        """The manifest as a Manifest (read_manifest's checks)."""
        return Manifest.from_dict(self.read_manifest())


# ---------------------------------------------------------------- the manifest's dataclasses

@dataclasses.dataclass(frozen=True)
class Link:
    rate: str | None = None           # "1gbit"
    rate_bit: int | None = None
    mtu: int | None = None
    loss: float | None = None
    kind: str | None = None           # "veth", "loopback", "ethernet" where the testbed says

    @classmethod
    def from_dict(cls, d):
        d = d or {}
        return cls(d.get("rate"), d.get("rate_bit"), d.get("mtu"), d.get("loss"), d.get("kind"))


@dataclasses.dataclass(frozen=True)
class Testbed:
    kind: str = "local"
    shared_kernel: bool = False
    link: Link = dataclasses.field(default_factory=Link)
    devices: tuple = ()

    @classmethod
    def from_dict(cls, d):
        d = d or {}
        return cls(d.get("kind", "local"), bool(d.get("shared_kernel")), Link.from_dict(d.get("link")),
                   tuple(d.get("devices") or ()))

    @property
    def virtual_link(self):
        """veth or loopback: no transmit-complete interrupt. The local testbed is veth pairs and a
        bridge; a link may say its kind explicitly."""
        if self.link.kind:
            return self.link.kind in ("veth", "loopback", "lo")
        return self.kind == "local"


@dataclasses.dataclass(frozen=True)
class Host:
    name: str
    role: str | None
    address: str | None = None
    kernel: str | None = None
    cpu_model: str | None = None
    cpus: tuple = ()
    clocksource: str | None = None

    @classmethod
    def from_dict(cls, name, d):
        return cls(name, d.get("role"), d.get("address"), d.get("kernel"), d.get("cpu_model"),
                   tuple(d.get("cpus") or ()), d.get("clocksource"))


@dataclasses.dataclass(frozen=True)
class CaseRecord:
    """One case of the manifest (cases[]); raw holds every field, the capture's full record."""
    id: str
    transport: str
    proc: str
    size: int
    calls: int
    warmup: int
    dir: str
    complete: bool
    untraced_p50: float | None = None      # ns, the kept round's client-measured p50 RTT
    traced_p50: float | None = None
    clock_p50: float | None = None         # the clock build's p50 (cases[].clock_reads.client_p50_ns)
    repeats: dict = dataclasses.field(default_factory=dict)    # rounds, kept_round, KIND_p50_ns, ...
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, c):
        return cls(c["id"], c.get("transport", ""), c.get("proc", ""), c.get("size", 0), c.get("calls", 0),
                   c.get("warmup", 0), c.get("dir", RunDir.case_rel(c["id"])), bool(c.get("complete")),
                   (c.get("untraced") or {}).get("p50"), (c.get("traced") or {}).get("p50"),
                   (c.get("clock_reads") or {}).get("client_p50_ns"), dict(c.get("repeats") or {}), c)

    @property
    def rounds(self):
        return self.repeats.get("rounds")

    @property
    def kept_round(self):
        return self.repeats.get("kept_round")


@dataclasses.dataclass(frozen=True)
class Manifest:
    """manifest.json: the typed fields every reader needs; raw holds the rest (calibration, sweeps,
    idle, tools, ...), as the capture wrote it."""
    format: int
    complete: bool
    interrupted: bool
    params: dict
    testbed: Testbed
    hosts: dict                       # {name: Host}
    cases: list                       # [CaseRecord]
    raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, m):
        problem = manifest_problem(m)
        if problem:
            raise ManifestError(f"a damaged manifest: {problem}")
        return cls(m.get("format"), bool(m.get("complete")), bool(m.get("interrupted")), dict(m.get("params") or {}),
                   Testbed.from_dict(m.get("testbed")),
                   {n: Host.from_dict(n, h) for n, h in (m.get("hosts") or {}).items()},
                   [CaseRecord.from_dict(c) for c in m.get("cases", [])], m)

    def host_of(self, role):
        return next((h.name for h in self.hosts.values() if h.role == role), None)


# ---------------------------------------------------------------- the manifest's shape

# Top-level fields that are objects, and the one that is a list.
TOP_OBJECTS = ("params", "testbed", "hosts", "server_wait", "kernel_collectors", "tools", "binaries",
               "calibration", "calibration_in_situ", "sweeps", "idle", "aslr", "wake_calibration", "cpu_speed",
               "phase_seconds")
# Per case: whole numbers, objects, text.
CASE_INTS = ("size", "calls", "warmup")
CASE_OBJECTS = ("untraced", "traced", "ust_only", "repeats", "pids", "sleeps_per_call", "clock_reads", "losses",
                "events", "trace_bytes", "clock_check")
CASE_TEXT = ("id", "transport", "proc", "dir")
PARAM_INTS = ("calls", "warmup", "executors")


def _shown(v):
    text = json.dumps(v) if isinstance(v, (dict, list, str, int, float, type(None))) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def manifest_problem(m):
    """What is wrong with the manifest's shape, as one phrase, or None. Only the fields the readers
    read are checked, and only where they are present:

        manifest_problem({"cases": [{"id": "x", "size": "big"}]})  # "cases[0].size is \"big\", not a whole number"
    """
    if not isinstance(m, dict):
        return f"the manifest is {_shown(m)}, not an object with \"format\" and \"cases\""
    for k in TOP_OBJECTS:
        if m.get(k) is not None and not isinstance(m[k], dict):
            return f"\"{k}\" is {_shown(m[k])}, not an object"
    params = m.get("params") or {}
    for k in PARAM_INTS:
        if params.get(k) is not None and not _is_int(params[k]):
            return f"params.{k} is {_shown(params[k])}, not a whole number"
    hosts = m.get("hosts") or {}
    for name, h in hosts.items():
        if not isinstance(h, dict):
            return f"hosts.{name} is {_shown(h)}, not an object"
    if m.get("testbed") and m["testbed"].get("link") is not None and not isinstance(m["testbed"]["link"], dict):
        return f"testbed.link is {_shown(m['testbed']['link'])}, not an object"
    cases = m.get("cases", [])
    if not isinstance(cases, list):
        return f"\"cases\" is {_shown(cases)}, not a list of cases"
    seen = set()
    for i, c in enumerate(cases):
        problem = _case_problem(f"cases[{i}]", c, seen)
        if problem:
            return problem
    return None


def _case_problem(where, c, seen):
    if not isinstance(c, dict):
        return f"{where} is {_shown(c)}, not an object"
    if not c.get("id") or not isinstance(c["id"], str):
        return f"{where} has no \"id\" (its text name, e.g. \"udp-maxarg-0\")"
    if c["id"] in seen:
        return f"{where}: the case id {c['id']!r} appears twice"
    seen.add(c["id"])
    for k in CASE_TEXT:
        if c.get(k) is not None and not isinstance(c[k], str):
            return f"{where}.{k} is {_shown(c[k])}, not text"
    for k in CASE_INTS:
        if c.get(k) is not None and not _is_int(c[k]):
            return f"{where}.{k} is {_shown(c[k])}, not a whole number"
        if _is_int(c.get(k)) and c[k] < 0:
            return f"{where}.{k} is {c[k]}, below 0"
    for k in CASE_OBJECTS:
        if c.get(k) is not None and not isinstance(c[k], dict):
            return f"{where}.{k} is {_shown(c[k])}, not an object"
    for kind in ("untraced", "traced", "ust_only"):
        p50 = (c.get(kind) or {}).get("p50")
        if p50 is not None and (isinstance(p50, bool) or not isinstance(p50, (int, float))):
            return f"{where}.{kind}.p50 is {_shown(p50)}, not a number"
    if ".." in str(c.get("dir", "")).split("/") or str(c.get("dir", "")).startswith("/"):
        return f"{where}.dir is {_shown(c['dir'])}: a case directory lies inside the run directory"
    return None


# ---------------------------------------------------------------- figures both sides of the contract read

def in_situ_calibrations(manifest):
    """{transport: {"transport", "proc", "calls", "warmup", "rounds", "sizes": {size: {...}}}} of the
    manifest's in-situ probe calibration runs (calibration_in_situ, one per transport; an older capture
    had one, for its first transport, at the top level of calibration_in_situ); {} where there are none
    (the per-case method keeps none: its cases are the calibration)."""
    meta = manifest.get("calibration_in_situ") or {}
    if not meta.get("complete"):
        return {}
    if "transports" in meta:
        return {t: dict(v, rounds=v.get("rounds", meta.get("rounds"))) for t, v in meta["transports"].items()}
    return {meta["transport"]: meta} if meta.get("sizes") and meta.get("transport") else {}


# The sweeps are settled when this many rounds (or every round, with fewer) agree with the kept one,
# itself included (manifest sweeps.TRANSPORT.settled).
SWEEP_SETTLE_ROUNDS = 3


def case_factors(p50s):
    """{case: [how fast the host ran the case in each round]}: exp of the mean over its kinds of ln(p50 /
    the kind's median over the rounds). The capture keeps its round by them (collectors/rounds.py
    turns_kept_round) and the analysis scales each round's p50s by them (analysis/run.py
    case_round_factors). p50s: {(case, kind): [p50 per round]}."""
    n = min((len(v) for v in p50s.values()), default=0)
    out = {}
    for (c, _), v in p50s.items():
        logs = [math.log(x) for x in v[:n]]
        mid = statistics.median(logs)
        out.setdefault(c, []).append([x - mid for x in logs])
    return {c: [math.exp(sum(k[r] for k in ks) / len(ks)) for r in range(n)] for c, ks in out.items()}


def sweeps_settled(agreeing, rounds):
    return len(agreeing) >= min(SWEEP_SETTLE_ROUNDS, rounds)


def sweeps_summary(sweeps):
    """The capture's rounds per transport (manifest sweeps) and the round every figure of its cases
    comes from, in words."""
    if not sweeps:
        return None
    return "; ".join(
        _turns_summary(t, v) if v.get("turns") else
        f"{t}: {v['rounds'] + v['extra_rounds']} sweeps of every size ({v['extra_rounds']} extra), round "
        f"{v['kept_round']} kept, {len(v['agreeing_rounds'])} rounds agree within {v['agree_pct']:g} % "
        f"({', '.join(map(str, v['agreeing_rounds']))})" + _kept_note(v)
        for t, v in sweeps.items())


def _turns_summary(transport, sweep):
    t = sweep["turns"]
    speed = t.get("round_speed") or [1.0]
    cut = (f" (of {sweep['rounds_asked']} asked: the capture's deadline, {sweep['deadline_seconds']:g} s, "
           "--deadline-seconds)") if sweep.get("ended") == "capture deadline" else ""
    return (f"{transport}: {sweep['rounds']} rounds{cut}, the {t['runs_per_round']} runs of each (every size and kind) "
            f"taking turns of {t['turn_calls']} calls (a median {t['turns_per_run_median']:g} turns a run); round "
            f"{sweep['kept_round']} kept for every size's traces, every figure the median of the rounds' p50s, each "
            "over how fast the host ran its size in that round "
            f"(the rounds' speeds ranged over {min(speed):.2f}-{max(speed):.2f}; the probe effects moved by a "
            f"median {t['probe_effect_spread_pct']} % between rounds)")


def unsettled_transports(manifest, transports):
    """Of transports, those whose sweeps never settled (manifest sweeps.<t>.settled), for the model's
    verdict (analysis/model.py goal_verdict)."""
    sweeps = (manifest or {}).get("sweeps") or {}
    return [t for t in transports if (sweeps.get(t) or {}).get("settled") is False]


def _kept_note(sweep):
    if sweep.get("settled"):
        other = {c: k for c, k in (sweep.get("kept_by_case") or {}).items() if k != sweep.get("kept_round")}
        return ("; sizes whose kept round had a kind off its level keep another (rounds " +
                ", ".join(f"{c.split('-')[-1]}: {k}" for c, k in other.items()) + ")") if other else ""
    note = f", NOT settled: fewer than {SWEEP_SETTLE_ROUNDS} rounds agreed, the host's speed level kept changing"
    if sweep.get("ended") == "extra-sweep seconds":
        note += f" (extra sweeps ended by their {sweep['extra_sweep_seconds']:g} s: --extra-sweep-seconds)"
    elif sweep.get("ended") == "capture deadline":
        note += (f" (extra sweeps ended by the capture's deadline, {sweep['deadline_seconds']:g} s: "
                 "--deadline-seconds)")
    if sweep.get("kept_by_case"):
        how = (f"most central whole round in the host's {sweep['level']} level" if sweep.get("level")
               else "fastest whole round")                   # a record without "level": fastest_round
        note += (f"; each size's {how} kept instead (rounds " +
                 ", ".join(f"{c.split('-')[-1]}: {k}" for c, k in sweep["kept_by_case"].items()) + ")")
    return note
