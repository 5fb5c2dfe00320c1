#!/usr/bin/env python3
"""Generate the LTTng-UST provider and the Python catalog from steps.toml.

Run by `make`; never edit the outputs by hand. Uses only the standard library
so that `make` works before the venv exists.

    gen_catalog.py CATALOG --c-header H --c-probe C --python PY
"""
import argparse
import pathlib
import pprint
import re
import sys
import tomllib

C_TYPES = {"u64": "uint64_t", "u32": "uint32_t", "u16": "uint16_t"}
SIDES = {"client": "C", "server": "S"}
NA_CONDITIONS = {"tcp", "single_window", "virtual_link", "inline", "busy_poll", "oneway", "no_nb_select", "recv_wait"}
# The RTT model's unit classes (analysis/pathsim.py UNITS, all but the per-byte cost).
MODEL_UNITS = ("call", "send", "packet", "receive", "wakeup", "ack")
# The collectors' kernel event groups (steps.toml [kernel_events], a kind's `group`).
KERNEL_GROUPS = ("net", "sched", "softirq", "copy", "qdisc", "none")
# What the collectors keep of a kernel event (steps.toml [kernel_events], a kind's `filter`; task: absent).
KERNEL_FILTERS = ("task", "switch", "woken", "device", "net_rx", "none")
# What a step can be to the path walk and the reconstruction (steps.toml, a step's `role`).
ROLES = ("send_in", "sendmsg", "send_out", "sleep", "softirq", "wake", "select", "recv", "tx_irq")
# Roles several steps of one side may have (steps.toml, a step's `role`); the others have one a side.
SHARED_ROLES = ("tx_irq",)
# The rules that build a span of user marks (steps.toml [spans], a span's `kind`).
SPAN_KINDS = ("send", "wait", "call")
# Where a step falls in the report's drawing of the round trip (steps.toml, a step's `phase`).
PHASES = ("request", "serve", "reply")


class CatalogError(Exception):
    pass


def load(path):
    try:
        with open(path, "rb") as f:
            cat = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise CatalogError(f"{path}: cannot read the catalog: {e}") from e
    check(cat, path)
    return cat


def check(cat, path):
    """Refuse a catalog that would generate a provider the analysis cannot trust."""
    classes = cat.get("classes", {})
    for name, cls in classes.items():
        fields = cls.get("fields", [])
        if not fields or fields[0] != ["call_id", "u64"]:
            raise CatalogError(f"{path}: class {name}: first field must be call_id u64")
        for fname, ftype in fields:
            if ftype not in C_TYPES:
                raise CatalogError(f"{path}: class {name}: field {fname}: unknown type {ftype}")
    ids = [s["id"] for s in cat["steps"]]
    for side, letter in SIDES.items():
        want = [f"{letter}{n}" for n in range(1, {"C": 23, "S": 17}[letter])]
        have = [i for i in ids if i.startswith(letter)]
        if have != want:
            raise CatalogError(f"{path}: {side} steps must be {want[0]}..{want[-1]} in order, got {have}")
    for s in cat["steps"]:
        where = f"{path}: step {s['id']}"
        if SIDES[s["side"]] != s["id"][0]:
            raise CatalogError(f"{where}: side {s['side']} does not match its id")
        if s["class"] not in classes:
            raise CatalogError(f"{where}: unknown class {s['class']}")
        if not (s.get("user") or s.get("kernel_begin") or s.get("kernel_inside") or s.get("kernel_end")):
            raise CatalogError(f"{where}: a step needs user marks or kernel marks")
        bad = set(s.get("not_applicable", [])) - NA_CONDITIONS
        if bad:
            raise CatalogError(f"{where}: unknown not_applicable condition(s) {sorted(bad)}")
        for n in s.get("next", []):
            if n not in ids:
                raise CatalogError(f"{where}: next names unknown step {n}")
        for cond, marks in s.get("absent_marks", {}).items():
            if cond not in NA_CONDITIONS or not set(marks) <= set(s.get("user", [])):
                raise CatalogError(f"{where}: absent_marks {cond}: {marks} must be known marks of the step")
        for m in s.get("user", []):
            if not re.fullmatch(r"[a-z]+", m):
                raise CatalogError(f"{where}: mark {m!r} must be lowercase letters")
        if s.get("unit") not in MODEL_UNITS:
            raise CatalogError(f"{where}: unit must be one of {', '.join(MODEL_UNITS)}, got {s.get('unit')!r}")
        if s.get("phase") not in PHASES:
            raise CatalogError(f"{where}: phase must be one of {', '.join(PHASES)}, got {s.get('phase')!r}")
        if s.get("role", "sendmsg") not in ROLES:
            raise CatalogError(f"{where}: role must be one of {', '.join(ROLES)}, got {s['role']!r}")
    if not isinstance(cat.get("net_rx_vector"), int):
        raise CatalogError(f"{path}: net_rx_vector (the NET_RX softirq's vector) must be a whole number")
    kev = cat.get("kernel_events", {})
    codes = [e["code"] for e in kev.values() if "code" in e]
    if len(codes) != len(set(codes)) or any(c < 4 or c > 255 for c in codes):
        raise CatalogError(f"{path}: [kernel_events]: codes must be distinct, 4..255 (0-3 are other, user, syscalls)")
    for kind, e in kev.items():
        if not e.get("perf") or e.get("group") not in KERNEL_GROUPS:
            raise CatalogError(f"{path}: [kernel_events.{kind}] needs perf and a group of {', '.join(KERNEL_GROUPS)}")
        if e.get("filter", "task") not in KERNEL_FILTERS or not isinstance(e.get("lean", True), bool):
            raise CatalogError(f"{path}: [kernel_events.{kind}]: filter must be one of "
                               f"{', '.join(KERNEL_FILTERS[1:])} (or absent), lean true or false")
        if "code" in e and not e.get("name"):
            raise CatalogError(f"{path}: [kernel_events.{kind}] has a code and so needs the analysis's name")
    for prefix, kind in cat.get("kernel_syscalls", {}).items():
        if kind not in ("syscall_entry", "syscall_exit"):
            raise CatalogError(f"{path}: [kernel_syscalls] {prefix!r}: syscall_entry or syscall_exit, got {kind!r}")
    for name, unit in cat.get("segments", {}).items():
        if unit not in MODEL_UNITS + ("network",):
            raise CatalogError(f"{path}: [segments] {name!r}: unit must be one of "
                               f"{', '.join(MODEL_UNITS + ('network',))}, got {unit!r}")
    roles = {s["id"]: s.get("role") for s in cat["steps"]}
    seen = set()
    for s in cat["steps"]:
        key = (s["side"], s.get("role"))
        if s.get("role") and s["role"] not in SHARED_ROLES and key in seen:
            raise CatalogError(f"{path}: step {s['id']}: a second {s['side']} step of role {s['role']!r}")
        seen.add(key)
    check_spans(cat, path)
    for name, part in cat.get("split", {}).items():
        if roles.get(part.get("of")) != "sendmsg" or not name.startswith(part["of"]):
            raise CatalogError(f"{path}: [split] {name!r}: 'of' must name the step of role sendmsg it is part of")
        if part.get("unit") not in MODEL_UNITS or not isinstance(part.get("rtp"), bool) or not part.get("name"):
            raise CatalogError(f"{path}: [split] {name!r} needs a name, rtp (true or false) and a unit")


def check_spans(cat, path):
    """[spans]: every step a span names is a step of its side; one span of kind call, and it lists last."""
    sides = {s["id"]: s["side"] for s in cat["steps"]}
    spans = cat.get("spans", {})
    for name, sp in spans.items():
        where = f"{path}: [spans] {name!r}"
        if sp.get("kind") not in SPAN_KINDS or sp.get("side") not in SIDES or not sp.get("name"):
            raise CatalogError(f"{where} needs a side, a name and a kind of {', '.join(SPAN_KINDS)}")
        named = [sp.get("first"), sp.get("last"), *sp.get("last_if", {}).values()]
        named += [sp["applies"]] if "applies" in sp else []
        if any(sides.get(sid) != sp["side"] for sid in named):
            raise CatalogError(f"{where}: first, last, last_if and applies must name {sp['side']} steps")
        bad = set(sp.get("last_if", {})) - NA_CONDITIONS
        if bad:
            raise CatalogError(f"{where}: unknown last_if condition(s) {sorted(bad)}")
        if any(sides.get(sid) != "server" for sid in sp.get("server_cpu", [])):
            raise CatalogError(f"{where}: server_cpu must name server steps")
    calls = [n for n, sp in spans.items() if sp.get("kind") == "call"]
    if spans and (len(calls) != 1 or calls[0] != list(spans)[-1]):
        raise CatalogError(f"{path}: [spans] needs one span of kind call, the last one")


def events(cat):
    """Every user-space event: (name, class, step id, mark), in catalog order."""
    out = []
    for s in cat["steps"]:
        for m in s.get("user", []):
            out.append((f"{s['id'].lower()}_{m}", s["class"], s["id"], m))
    return out


def c_header(cat):
    prov = cat["provider"]
    lines = [
        "/* Generated by tracepoints/gen_catalog.py from tracepoints/steps.toml. Do not edit. */",
        "#undef LTTNG_UST_TRACEPOINT_PROVIDER",
        f"#define LTTNG_UST_TRACEPOINT_PROVIDER {prov}",
        "#undef LTTNG_UST_TRACEPOINT_INCLUDE",
        '#define LTTNG_UST_TRACEPOINT_INCLUDE "rpcscope_tp.h"',
        "",
        "#if !defined(RPCSCOPE_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)",
        "#define RPCSCOPE_TP_H",
        "",
        "#include <stdint.h>",
        "#include <lttng/tracepoint.h>",
        "",
    ]
    for name, cls in cat["classes"].items():
        args = ", ".join(f"{C_TYPES[t]}, {f}" for f, t in cls["fields"])
        fields = " ".join(f"lttng_ust_field_integer({C_TYPES[t]}, {f}, {f})" for f, t in cls["fields"])
        lines += [
            f"LTTNG_UST_TRACEPOINT_EVENT_CLASS({prov}, {name},",
            f"    LTTNG_UST_TP_ARGS({args}),",
            f"    LTTNG_UST_TP_FIELDS({fields}))",
            "",
        ]
    for ev, cls, _, _ in events(cat):
        args = ", ".join(f"{C_TYPES[t]}, {f}" for f, t in cat["classes"][cls]["fields"])
        lines.append(f"LTTNG_UST_TRACEPOINT_EVENT_INSTANCE({prov}, {cls}, {prov}, {ev}, LTTNG_UST_TP_ARGS({args}))")
    lines += ["", "#endif /* RPCSCOPE_TP_H */", "", "#include <lttng/tracepoint-event.h>", ""]
    return "\n".join(lines)


def c_probe():
    return "\n".join([
        "/* Generated by tracepoints/gen_catalog.py. Do not edit. */",
        "#define LTTNG_UST_TRACEPOINT_CREATE_PROBES",
        "#define LTTNG_UST_TRACEPOINT_DEFINE",
        '#include "rpcscope_tp.h"',
        "",
    ])


def python_module(cat):
    steps = []
    for s in cat["steps"]:
        steps.append({
            "id": s["id"], "side": s["side"], "name": s["name"], "dce": s["dce"],
            "event_class": s["class"],
            "user_events": [f"{s['id'].lower()}_{m}" for m in s.get("user", [])],
            "kernel_begin": s.get("kernel_begin", "").split("|") if s.get("kernel_begin") else [],
            "kernel_inside": s.get("kernel_inside", "").split("|") if s.get("kernel_inside") else [],
            "kernel_end": s.get("kernel_end", "").split("|") if s.get("kernel_end") else [],
            "rtp": s["rtp"], "not_applicable": s.get("not_applicable", []),
            "absent_marks": {c: [f"{s['id'].lower()}_{m}" for m in ms] for c, ms in s.get("absent_marks", {}).items()},
            "next": s.get("next", []), "per": s["per"], "unit": s["unit"], "role": s.get("role"),
            "phase": s["phase"],
        })
    evs = [{"name": f"{cat['provider']}:{n}", "event_class": c, "step": sid, "mark": m}
           for n, c, sid, m in events(cat)]
    classes = {n: [f for f, _ in c["fields"]] for n, c in cat["classes"].items()}
    body = [
        '"""Generated by tracepoints/gen_catalog.py from tracepoints/steps.toml. Do not edit."""',
        f"PROVIDER = {cat['provider']!r}",
        f"CLASSES = {pprint.pformat(classes, sort_dicts=False)}",
        f"STEPS = {pprint.pformat(steps, sort_dicts=False, width=100)}",
        f"EVENTS = {pprint.pformat(evs, sort_dicts=False, width=100)}",
        f"SPLIT = {pprint.pformat(cat.get('split', {}), sort_dicts=False, width=100)}",
        f"NET_RX_VECTOR = {cat['net_rx_vector']!r}",
        f"SPANS = {pprint.pformat(cat.get('spans', {}), sort_dicts=False, width=100)}",
        f"SEGMENT_UNITS = {pprint.pformat(cat.get('segments', {}), sort_dicts=False, width=100)}",
        f"KERNEL_EVENTS = {pprint.pformat(cat.get('kernel_events', {}), sort_dicts=False, width=100)}",
        f"KERNEL_SYSCALLS = {pprint.pformat(cat.get('kernel_syscalls', {}), sort_dicts=False, width=100)}",
        "",
    ]
    return "\n".join(body)


def kernel_spellings(e):
    """Every raw name a trace may give a kernel event kind: perf's, LTTng's, the bare name, aliases."""
    out = []
    for n in [e.get("perf"), e.get("lttng"), e.get("name"), *e.get("aliases", [])]:
        if n and n not in out:
            out.append(n)
    return out


def c_kernel(cat):
    """A C header with the kernel event kinds and their spellings, for analysis/ctfcols.c."""
    kev = {k: e for k, e in cat.get("kernel_events", {}).items() if "code" in e}
    consts = ["K_OTHER = 0", "K_USER = 1", "K_SYS_ENTRY = 2", "K_SYS_EXIT = 3"] + \
        [f"K_{k.upper()} = {e['code']}" for k, e in kev.items()]
    names = [f'\t{{"{raw}", K_{k.upper()}, "{e["name"]}"}},' for k, e in kev.items() for raw in kernel_spellings(e)]
    sys_ = [f'\t{{"{p}", {"K_SYS_ENTRY" if k == "syscall_entry" else "K_SYS_EXIT"}}},'
            for p, k in cat.get("kernel_syscalls", {}).items()]
    return "\n".join([
        "/* Generated by tracepoints/gen_catalog.py from tracepoints/steps.toml ([kernel_events],",
        " * [kernel_syscalls]). Do not edit. */",
        "#ifndef RPCSCOPE_KERNEL_H",
        "#define RPCSCOPE_KERNEL_H",
        "",
        "enum { " + ", ".join(consts) + " };",
        "",
        "static const struct { const char *raw; unsigned char kind; const char *name; } rpcscope_kernel_names[] = {",
        *names,
        "};",
        "",
        "static const struct { const char *prefix; unsigned char kind; } rpcscope_syscall_prefixes[] = {",
        *sys_,
        "};",
        "",
        "#endif",
        "",
    ])


def write_if_changed(path, text):
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if not p.exists() or p.read_text() != text:
        p.write_text(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("catalog")
    ap.add_argument("--c-header", required=True)
    ap.add_argument("--c-probe", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--c-kernel", required=True, help="the kernel event kinds, for analysis/ctfcols.c")
    a = ap.parse_args(argv)
    try:
        cat = load(a.catalog)
    except CatalogError as e:
        print(f"gen_catalog: {e}", file=sys.stderr)
        return 1
    write_if_changed(a.c_header, c_header(cat))
    write_if_changed(a.c_probe, c_probe())
    write_if_changed(a.python, python_module(cat))
    write_if_changed(a.c_kernel, c_kernel(cat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
