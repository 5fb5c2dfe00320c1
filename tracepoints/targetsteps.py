"""The step catalog for any RPC: tracepoints/steps.toml [[target_steps]], read by the catalog's own
loader (gen_catalog.load) and checked here.

    from rpcscope.tracepoints.targetsteps import target_steps, on_path
    [s.id for s in on_path()]        # ["K1", ..., "K11"], the round-trip path in order
    [s.id for s in edges()]          # ["KC1", "KC2"], the call's edges a call-enclosing --uprobe measures
"""
import dataclasses
import functools
import pathlib

from .gen_catalog import MODEL_UNITS, PHASES, CatalogError, load

CATALOG = pathlib.Path(__file__).resolve().parent / "steps.toml"
SIDES = ("client", "server", "network")
EDGES = ("", "before", "after")


@dataclasses.dataclass(frozen=True)
class TargetStep:
    """One step of [[target_steps]]."""
    id: str
    side: str
    name: str
    dce: tuple
    kernel_begin: tuple
    kernel_end: tuple
    rtp: bool
    unit: str
    phase: str
    absent: str
    edge: str = ""       # "before"/"after": the call's edge, measured by a --uprobe that encloses the call


def parse(cat, path=CATALOG):
    """The [[target_steps]] of a loaded catalog as TargetSteps; CatalogError naming a bad entry."""
    rows = cat.get("target_steps")
    if not rows:
        raise CatalogError(f"{path}: no [[target_steps]] table")
    known = {s["id"] for s in cat["steps"]} | set(cat.get("split", {})) | set(cat.get("segments", {}))
    out, path_ids = [], []
    for r in rows:
        where = f"{path}: target step {r.get('id')!r}"
        for key in ("id", "side", "name", "dce", "kernel_begin", "kernel_end", "rtp", "unit", "phase"):
            if key not in r:
                raise CatalogError(f"{where}: needs {key}")
        if r["side"] not in SIDES:
            raise CatalogError(f"{where}: side must be one of {', '.join(SIDES)}")
        if r["unit"] not in MODEL_UNITS or r["phase"] not in PHASES:
            raise CatalogError(f"{where}: unit or phase is not one the catalog knows")
        bad = [d for d in r["dce"] if d not in known]
        if bad:
            raise CatalogError(f"{where}: dce names unknown steps {bad}")
        if r.get("edge", "") not in EDGES or (r.get("edge") and r["rtp"]):
            raise CatalogError(f"{where}: edge must be one of {', '.join(EDGES[1:])}, on a step with rtp = false")
        if r["rtp"]:
            path_ids.append(r["id"])
        out.append(TargetStep(id=r["id"], side=r["side"], name=r["name"], dce=tuple(r["dce"]),
                              kernel_begin=tuple(r["kernel_begin"].split("|")),
                              kernel_end=tuple(r["kernel_end"].split("|")), rtp=bool(r["rtp"]), unit=r["unit"],
                              phase=r["phase"], absent=r.get("absent", ""),
                              edge=r.get("edge", "")))
    if path_ids != [f"K{n}" for n in range(1, len(path_ids) + 1)]:
        raise CatalogError(f"{path}: the round-trip path's target steps must be K1..Kn in order, got {path_ids}")
    return out


@functools.cache
def target_steps():
    """Every target step, in catalog order."""
    return tuple(parse(load(CATALOG)))


def on_path():
    """The target steps on the round-trip path, K1 first."""
    return tuple(s for s in target_steps() if s.rtp)


def edges():
    """The call's edge steps (before K1, after K11), measured when a --uprobe encloses the call."""
    before = [s for s in target_steps() if s.edge == "before"]
    after = [s for s in target_steps() if s.edge == "after"]
    return tuple(before + after)


def kernel_steps():
    """The steps the kernel's events bound: the path K1..Kn and the steps beside it, not the edges."""
    return tuple(s for s in target_steps() if not s.edge)


def by_id(step_id):
    for s in target_steps():
        if s.id == step_id:
            return s
    raise KeyError(f"no target step {step_id!r} in {CATALOG} (K1..K11, KO1, KO2, KC1, KC2)")
