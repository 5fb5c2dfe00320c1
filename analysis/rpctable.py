"""The per-RPC table `rpcscope analyze` writes (analysis/rpcs.jsonl.gz, rpcscope/rundir.py RPCS_TABLE), and
its reader for the reports.

    from rpcscope.analysis.rpctable import read_rpc_table
    t = read_rpc_table("runs/NAME")          # {case id: CaseTable}
    t["udp-null-0"].measured_us("RTT")       # every measured RPC's traced round trip, us

The file is gzip'd JSON lines: a first line {"format": RPCS_FORMAT, "rows": [...], ...} names the rows
(the catalog's steps, the parts of a split step and the spans of user marks, in analysis/rpcrows.py
ROW_ORDER), then one line per case: its call ids, and per row each RPC's duration in ns (null where
it was not measured) and status, one letter an RPC (STATUS_LETTERS).
"""
import dataclasses
import gzip
import json
import math

from rpcscope.rundir import RPCS_FORMAT, RPCS_TABLE, RunDir

from .rpcrows import MEASURED, MISSING, NOT_APPLICABLE, ROW_ORDER

# An RPC's status in a row, one letter each: measured, not applicable, missing.
STATUS_LETTERS = {MEASURED: "m", NOT_APPLICABLE: "a", MISSING: "x"}
_LETTER_MEANS = {"m": "measured", "a": "not applicable", "x": "missing"}


class RpcTableError(Exception):
    """The per-RPC table is not there, unreadable or of another format: one line saying what to do."""


@dataclasses.dataclass
class CaseTable:
    """One case's RPCs: call ids, and per row each RPC's duration (ns, None: not measured) and status
    letter (STATUS_LETTERS)."""
    case: str
    call_ids: list
    dur_ns: dict
    status: dict

    def measured_us(self, row):
        """The durations of the RPCs measured in a row, in us."""
        return [d / 1000.0 for d, s in zip(self.dur_ns[row], self.status[row]) if s == "m" and d is not None]


def _dur(v):
    return None if v is None or not math.isfinite(v) else int(round(v))


def write_rpc_table(out_dir, per_rpc):
    """Write out_dir/RPCS_TABLE from {case id: CaseRPCs} (analysis/rpcrows.py), through a temporary file."""
    path = out_dir / RPCS_TABLE
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", compresslevel=6) as f:
        f.write(json.dumps({"format": RPCS_FORMAT, "rows": ROW_ORDER, "unit": "ns", "status": _LETTER_MEANS}) + "\n")
        for cid, r in per_rpc.items():
            f.write(json.dumps({
                "case": cid, "call_id": [int(c) for c in r.call_ids],
                "dur_ns": {name: [_dur(v) for v in r.rows[name].dur.tolist()] for name in ROW_ORDER},
                "status": {name: "".join(STATUS_LETTERS[int(s)] for s in r.rows[name].status) for name in ROW_ORDER},
            }, separators=(",", ":")) + "\n")
    tmp.replace(path)
    return path


def read_rpc_table(run):
    """{case id: CaseTable} of a run directory's per-RPC table; RpcTableError when it is missing or of
    another format (both: re-run `rpcscope analyze RUN`)."""
    rd = RunDir(run)
    path = rd.rpcs_table
    again = f"run `rpcscope analyze {rd.path}` to write it"
    try:
        with gzip.open(path, "rt") as f:
            head = json.loads(f.readline() or "null")
            if not isinstance(head, dict) or head.get("format") != RPCS_FORMAT:
                got = head.get("format") if isinstance(head, dict) else None
                raise RpcTableError(f"{path}: format {got!r}, this rpcscope reads {RPCS_FORMAT}: {again} again")
            out = {}
            for line in f:
                c = json.loads(line)
                out[c["case"]] = CaseTable(c["case"], c["call_id"], c["dur_ns"], c["status"])
            return out
    except FileNotFoundError:
        raise RpcTableError(f"{path} is not there (the run was analysed without the per-RPC table): "
                            f"{again}") from None
    except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
        raise RpcTableError(f"{path}: unreadable ({e}): {again} again") from None
