"""The shape of a run's manifest.json, checked before the analysis reads it.

A manifest that is valid JSON of the wrong shape (`[]`, `null`, `"cases": "x"`, a case whose
`"size"` is `"big"`) is refused with one line naming the field, what it holds and what it should
hold, instead of a Python error somewhere in the analysis. Only the fields the analysis reads are
checked, and only where they are present (older runs lack some):

    problem = manifest_problem(json.loads(text))     # None, or "cases[0].size is 'big', not a whole number"
"""
import json

# Top-level fields that are objects, and the one that is a list.
TOP_OBJECTS = ("params", "testbed", "hosts", "server_wait", "kernel_collectors", "tools", "binaries",
               "calibration", "calibration_in_situ", "sweeps", "idle", "aslr", "wake_calibration", "cpu_speed",
               "phase_seconds")
# Per case: whole numbers, objects, text.
CASE_INTS = ("size", "calls", "warmup")
CASE_OBJECTS = ("untraced", "traced", "ust_only", "repeats", "pids", "sleeps_per_call", "clock_reads", "losses",
                "events", "trace_bytes")
CASE_TEXT = ("id", "transport", "proc", "dir")
PARAM_INTS = ("calls", "warmup", "executors")


def _shown(v):
    text = json.dumps(v) if isinstance(v, (dict, list, str, int, float, type(None))) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def manifest_problem(m):
    """What is wrong with the manifest's shape, as one phrase, or None."""
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
    cases = m.get("cases", [])
    if not isinstance(cases, list):
        return f"\"cases\" is {_shown(cases)}, not a list of cases"
    seen = set()
    for i, c in enumerate(cases):
        where = f"cases[{i}]"
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
