"""The stub compiler: interface files in, C client and server stubs out.

    python3 stubs/compiler.py -o build/stubs stubs/idl/chung.idl stubs/idl/calib.idl

For every interface NAME it writes NAME_stubs.h and NAME_stubs.c, and for the
whole set one registry, stubreg.h / stubreg.c, listing every procedure. Each
procedure P gets an args struct and, for each design alternative of the paper,
a marshal and an unmarshal function (see stubs/README.md for the API):

    int NAME_P_marshal_VARIANT(const struct NAME_P_args *args, uint8_t *buf,
                               size_t cap, size_t *len, int order);
    int NAME_P_unmarshal_VARIANT(struct NAME_P_args *args, const uint8_t *buf,
                                 size_t len, size_t *used, int order);

VARIANT is inline_byte, inline_item, proc_byte, proc_item or block.
"""
import argparse
import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import idl  # noqa: E402
else:
    from . import idl

Int, Str, Arr, Rec = idl.Int, idl.Str, idl.Arr, idl.Rec

VARIANTS = ["inline_byte", "inline_item", "proc_byte", "proc_item", "block"]


def blittable(t):
    """True when t's bytes in memory are its bytes on the wire in native order,
    so that one memcpy can move it: integers, and records of blittable fields
    with no padding. Arrays and strings carry a count on the wire, so never."""
    if isinstance(t, Int):
        return True
    if isinstance(t, Rec):
        size, _, offs = idl.record_layout(t.fields)
        return all(blittable(f) for f in t.fields) and size == sum(idl.layout(f)[0] for f in t.fields)
    return False


class _Proc:
    """Code generation for one procedure."""

    def __init__(self, iface, proc):
        self.iface, self.proc = iface, proc
        self.prefix = f"{iface.name}_{proc.name}"
        self.names = {}       # Rec/Str type -> C struct name
        self.order = []       # types in declaration order (inner first)
        for a in proc.args:
            self._name_types(a)

    def _name_types(self, t):
        if isinstance(t, Arr):
            self._name_types(t.elem)
        elif isinstance(t, Rec):
            for f in t.fields:
                self._name_types(f)
        if isinstance(t, (Rec, Str)) and t not in self.names:
            self.names[t] = f"{self.prefix}_t{len(self.names) + 1}"
            self.order.append(t)

    def records(self):
        return [t for t in self.order if isinstance(t, Rec)]

    # -- declarations
    def decl(self, t, name):
        dims = ""
        while isinstance(t, Arr):
            dims += f"[{t.count}]"
            t = t.elem
        base = "int32_t" if isinstance(t, Int) else f"struct {self.names[t]}"
        return f"{base} {name}{dims};"

    def header(self):
        out = []
        for t in self.order:
            out.append(f"struct {self.names[t]} {{")
            if isinstance(t, Str):
                out += ["\tuint32_t len;", f"\tchar data[{t.max}];"]
            else:
                out += ["\t" + self.decl(f, f"f{k + 1}") for k, f in enumerate(t.fields)]
            out.append("};")
        p = self.prefix
        out.append(f"/* {self.proc.name} {self.proc.notation()} */")
        out.append(f"struct {p}_args {{")
        out += ["\t" + self.decl(a, f"a{k + 1}") for k, a in enumerate(self.proc.args)]
        out.append("};")
        out.append(f"#define {p.upper()}_DESC \"{self.proc.text}\"")
        out.append(f"#define {p.upper()}_WIRE_MAX {idl.wire_max(Rec(self.proc.args))}u")
        for v in VARIANTS:
            out.append(f"int {p}_marshal_{v}(const struct {p}_args *args, uint8_t *buf, size_t cap, size_t *len, "
                       "int order);")
            out.append(f"int {p}_unmarshal_{v}(struct {p}_args *args, const uint8_t *buf, size_t len, size_t *used, "
                       "int order);")
        out.append(f"extern const struct stubrt_proc {p}_proc;")
        return "\n".join(out) + "\n"

    # -- marshal code
    def put(self, t, expr, mv, depth, ind):
        """Lines that marshal expr of type t with movement mv ('byte' or 'item'),
        inline: the cursor is the locals p and end."""
        T = "\t" * ind
        if isinstance(t, Int):
            return [f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto space;",
                    f"{T}stubrt_store_{mv}(p, (uint32_t){expr}, order);", f"{T}p += 4;"]
        if isinstance(t, Str):
            i = f"i{depth}"
            return [f"{T}if ({expr}.len > {t.max}u) {{", f"{T}\trc = STUBRT_E_LENGTH;", f"{T}\tgoto out;", f"{T}}}",
                    f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto space;",
                    f"{T}stubrt_store_{mv}(p, {expr}.len, order);", f"{T}p += 4;",
                    # Locals for the length and the source: a store through p
                    # may alias them, and reloading each time is not the design.
                    f"{T}{{", f"{T}\tconst uint32_t n = {expr}.len;", f"{T}\tconst char *s = {expr}.data;",
                    f"{T}\tfor (uint32_t {i} = 0; {i} < n; {i}++) {{",
                    f"{T}\t\tif (p == end)", f"{T}\t\t\tgoto space;",
                    f"{T}\t\t*p++ = (uint8_t)s[{i}];", f"{T}\t}}", f"{T}}}"]
        if isinstance(t, Arr):
            i = f"i{depth}"
            return (self.put(Int(), f"{t.count}u", mv, depth, ind)
                    + [f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.put(t.elem, f"{expr}[{i}]", mv, depth + 1, ind + 1) + [f"{T}}}"])
        lines = []
        for k, f in enumerate(t.fields):
            lines += self.put(f, f"{expr}.f{k + 1}", mv, depth, ind)
        return lines

    def put_proc(self, t, expr, mv, depth, ind):
        """Procedural: one call per data item through the cursor c; records
        go through a factored procedure of their own."""
        T = "\t" * ind
        if isinstance(t, Int):
            return [f"{T}if ((rc = stubrt_put_int_{mv}(c, (uint32_t){expr})) != STUBRT_OK)", f"{T}\tgoto out;"]
        if isinstance(t, Str):
            return [f"{T}if ((rc = stubrt_put_str_{mv}(c, {expr}.data, {expr}.len, {t.max}u)) != STUBRT_OK)",
                    f"{T}\tgoto out;"]
        if isinstance(t, Arr):
            i = f"i{depth}"
            return (self.put_proc(Int(), f"{t.count}u", mv, depth, ind)
                    + [f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.put_proc(t.elem, f"{expr}[{i}]", mv, depth + 1, ind + 1) + [f"{T}}}"])
        return [f"{T}if ((rc = {self.names[t]}_put_{mv}(c, &{expr})) != STUBRT_OK)", f"{T}\tgoto out;"]

    def put_block(self, t, expr, depth, ind):
        """Block copy: memcpy every blittable run whose size is known; item
        copy for what is left (the counts and lengths)."""
        T = "\t" * ind
        if isinstance(t, Int):
            return self.put(t, expr, "item", depth, ind)
        if isinstance(t, Str):
            return [f"{T}if ({expr}.len > {t.max}u) {{", f"{T}\trc = STUBRT_E_LENGTH;", f"{T}\tgoto out;", f"{T}}}",
                    f"{T}if ((size_t)(end - p) < 4 + (size_t){expr}.len)", f"{T}\tgoto space;",
                    f"{T}stubrt_store_item(p, {expr}.len, order);",
                    f"{T}stubrt_bcopy(p + 4, {expr}.data, {expr}.len);", f"{T}p += 4 + (size_t){expr}.len;"]
        if isinstance(t, Arr) and blittable(t.elem):
            n = t.count * idl.layout(t.elem)[0]
            return [f"{T}if ((size_t)(end - p) < {4 + n}u)", f"{T}\tgoto space;",
                    f"{T}stubrt_store_item(p, {t.count}u, order);",
                    f"{T}stubrt_bcopy(p + 4, {expr}, {n}u);", f"{T}p += {4 + n}u;"]
        if isinstance(t, Arr):
            i = f"i{depth}"
            return (self.put(Int(), f"{t.count}u", "item", depth, ind)
                    + [f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.put_block(t.elem, f"{expr}[{i}]", depth + 1, ind + 1) + [f"{T}}}"])
        if blittable(t):
            n = idl.layout(t)[0]
            return [f"{T}if ((size_t)(end - p) < {n}u)", f"{T}\tgoto space;",
                    f"{T}stubrt_bcopy(p, &{expr}, {n}u);", f"{T}p += {n}u;"]
        lines = []
        for k, f in enumerate(t.fields):
            lines += self.put_block(f, f"{expr}.f{k + 1}", depth, ind)
        return lines

    # -- unmarshal code
    def get(self, t, expr, mv, depth, ind):
        T = "\t" * ind
        if isinstance(t, Int):
            return [f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto short_;",
                    f"{T}{expr} = (int32_t)stubrt_load_{mv}(p, order);", f"{T}p += 4;"]
        if isinstance(t, Str):
            i = f"i{depth}"
            return [f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto short_;",
                    f"{T}{expr}.len = stubrt_load_{mv}(p, order);",
                    f"{T}if ({expr}.len > {t.max}u) {{", f"{T}\trc = STUBRT_E_LENGTH;", f"{T}\tgoto out;", f"{T}}}",
                    f"{T}p += 4;",
                    f"{T}{{", f"{T}\tconst uint32_t n = {expr}.len;", f"{T}\tchar *s = {expr}.data;",
                    f"{T}\tfor (uint32_t {i} = 0; {i} < n; {i}++) {{",
                    f"{T}\t\tif (p == end)", f"{T}\t\t\tgoto short_;",
                    f"{T}\t\ts[{i}] = (char)*p++;", f"{T}\t}}", f"{T}}}"]
        if isinstance(t, Arr):
            i = f"i{depth}"
            return (self.get_count(t.count, f"stubrt_load_{mv}", ind)
                    + [f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.get(t.elem, f"{expr}[{i}]", mv, depth + 1, ind + 1) + [f"{T}}}"])
        lines = []
        for k, f in enumerate(t.fields):
            lines += self.get(f, f"{expr}.f{k + 1}", mv, depth, ind)
        return lines

    def get_count(self, count, load, ind):
        T = "\t" * ind
        return [f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto short_;",
                f"{T}if ({load}(p, order) != {count}u) {{", f"{T}\trc = STUBRT_E_COUNT;", f"{T}\tgoto out;", f"{T}}}",
                f"{T}p += 4;"]

    def get_proc(self, t, expr, mv, depth, ind):
        T = "\t" * ind
        if isinstance(t, Int):
            return [f"{T}if ((rc = stubrt_get_int_{mv}(c, &v)) != STUBRT_OK)", f"{T}\tgoto out;",
                    f"{T}{expr} = (int32_t)v;"]
        if isinstance(t, Str):
            return [f"{T}if ((rc = stubrt_get_str_{mv}(c, {expr}.data, &{expr}.len, {t.max}u)) != STUBRT_OK)",
                    f"{T}\tgoto out;"]
        if isinstance(t, Arr):
            i = f"i{depth}"
            return ([f"{T}if ((rc = stubrt_get_int_{mv}(c, &v)) != STUBRT_OK)", f"{T}\tgoto out;",
                     f"{T}if (v != {t.count}u) {{", f"{T}\trc = STUBRT_E_COUNT;", f"{T}\tgoto out;", f"{T}}}",
                     f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.get_proc(t.elem, f"{expr}[{i}]", mv, depth + 1, ind + 1) + [f"{T}}}"])
        return [f"{T}if ((rc = {self.names[t]}_get_{mv}(c, &{expr})) != STUBRT_OK)", f"{T}\tgoto out;"]

    def get_block(self, t, expr, depth, ind):
        T = "\t" * ind
        if isinstance(t, Int):
            return self.get(t, expr, "item", depth, ind)
        if isinstance(t, Str):
            return [f"{T}if ((size_t)(end - p) < 4)", f"{T}\tgoto short_;",
                    f"{T}{expr}.len = stubrt_load_item(p, order);",
                    f"{T}if ({expr}.len > {t.max}u) {{", f"{T}\trc = STUBRT_E_LENGTH;", f"{T}\tgoto out;", f"{T}}}",
                    f"{T}if ((size_t)(end - p) - 4 < (size_t){expr}.len)", f"{T}\tgoto short_;",
                    f"{T}stubrt_bcopy({expr}.data, p + 4, {expr}.len);", f"{T}p += 4 + (size_t){expr}.len;"]
        if isinstance(t, Arr) and blittable(t.elem):
            n = t.count * idl.layout(t.elem)[0]
            return (self.get_count(t.count, "stubrt_load_item", ind)
                    + [f"{T}if ((size_t)(end - p) < {n}u)", f"{T}\tgoto short_;",
                       f"{T}stubrt_bcopy({expr}, p, {n}u);", f"{T}p += {n}u;"])
        if isinstance(t, Arr):
            i = f"i{depth}"
            return (self.get_count(t.count, "stubrt_load_item", ind)
                    + [f"{T}for (uint32_t {i} = 0; {i} < {t.count}u; {i}++) {{"]
                    + self.get_block(t.elem, f"{expr}[{i}]", depth + 1, ind + 1) + [f"{T}}}"])
        if blittable(t):
            n = idl.layout(t)[0]
            return [f"{T}if ((size_t)(end - p) < {n}u)", f"{T}\tgoto short_;",
                    f"{T}stubrt_bcopy(&{expr}, p, {n}u);", f"{T}p += {n}u;"]
        lines = []
        for k, f in enumerate(t.fields):
            lines += self.get_block(f, f"{expr}.f{k + 1}", depth, ind)
        return lines

    # -- functions
    def source(self):
        p = self.prefix
        out = [f"/* ---- {self.proc.name} {self.proc.notation()} */", ""]
        size = idl.record_layout(self.proc.args)[0]
        out.append(f"_Static_assert(sizeof(struct {p}_args) == {size}u, "
                   f"\"struct {p}_args is not laid out as the interpreter expects\");")
        out.append("")
        # Factored record procedures for the procedural variants; noinline so
        # that each record costs the call the paper counts as combining cost.
        for mv in ("byte", "item"):
            for r in self.records():
                rn = self.names[r]
                body = []
                for k, f in enumerate(r.fields):
                    body += self.put_proc(f, f"r->f{k + 1}", mv, 0, 1)
                out += [f"static __attribute__((noinline)) int {rn}_put_{mv}(struct stubrt_cursor *c, "
                        f"const struct {rn} *r)",
                        "{", "\tint rc = STUBRT_OK;", ""] + body + self._tail(body) + ["}", ""]
                body = []
                for k, f in enumerate(r.fields):
                    body += self.get_proc(f, f"r->f{k + 1}", mv, 0, 1)
                decl_v = ["\tuint32_t v;"] if "&v)" in "\n".join(body) else []
                out += [f"static __attribute__((noinline)) int {rn}_get_{mv}(struct stubrt_rcursor *c, struct {rn} *r)",
                        "{", "\tint rc = STUBRT_OK;"] + decl_v + [""] + body + self._tail(body) + ["}", ""]
        for v in VARIANTS:
            out += self.marshal_fn(v) + [""] + self.unmarshal_fn(v) + [""]
        # One wrapper per variant so that the table has uniform, void-typed entries.
        for k, v in enumerate(VARIANTS):
            out.append(f"static int {p}_m{k}(const void *a, uint8_t *b, size_t cap, size_t *len, int order)")
            out.append(f"{{\n\treturn {p}_marshal_{v}(a, b, cap, len, order);\n}}")
            out.append(f"static int {p}_u{k}(void *a, const uint8_t *b, size_t len, size_t *used, int order)")
            out.append(f"{{\n\treturn {p}_unmarshal_{v}(a, b, len, used, order);\n}}")
        out.append("")
        wm = idl.wire_max(Rec(self.proc.args))
        out.append(f"const struct stubrt_proc {p}_proc = {{")
        out.append(f"\t\"{self.iface.name}\", \"{self.proc.name}\", {p.upper()}_DESC, sizeof(struct {p}_args), {wm}u,")
        out.append("\t{ " + ", ".join(f"{p}_m{k}" for k in range(len(VARIANTS))) + " },")
        out.append("\t{ " + ", ".join(f"{p}_u{k}" for k in range(len(VARIANTS))) + " },")
        out.append("};")
        return "\n".join(out) + "\n"

    @staticmethod
    def _tail(body):
        lines = []
        if "goto out" in "\n".join(body):
            lines.append("out:")
        lines.append("\treturn rc;")
        return lines

    def marshal_fn(self, v):
        p = self.prefix
        mv = v.split("_")[-1]
        body = []
        if v.startswith("inline"):
            for k, a in enumerate(self.proc.args):
                body += self.put(a, f"args->a{k + 1}", mv, 0, 1)
        elif v == "block":
            for k, a in enumerate(self.proc.args):
                body += self.put_block(a, f"args->a{k + 1}", 0, 1)
        else:
            for k, a in enumerate(self.proc.args):
                body += self.put_proc(a, f"args->a{k + 1}", mv, 0, 1)
        head = [f"int {p}_marshal_{v}(const struct {p}_args *args, uint8_t *buf, size_t cap, size_t *len, int order)",
                "{", "\tint rc = STUBRT_OK;"]
        if v.startswith("proc"):
            head += ["\tstruct stubrt_cursor cur, *const c = &cur;"]
        else:
            head += ["\tuint8_t *p = buf, *end;"]
        head += ["",
                 "\tif (!args || !buf || !len) {", "\t\trc = STUBRT_E_ARG;", "\t\tgoto out;", "\t}"]
        if v == "block":
            head += ["\t/* Block copy moves memory as it is: it cannot swap. */",
                     "\tif (order != STUBRT_NATIVE) {", "\t\trc = STUBRT_E_ORDER;", "\t\tgoto out;", "\t}"]
        else:
            head += ["\tif (!stubrt_valid_order(order)) {", "\t\trc = STUBRT_E_ORDER;", "\t\tgoto out;", "\t}"]
        if v.startswith("proc"):
            head += ["\tcur.p = buf;", "\tcur.end = buf + cap;", "\tcur.order = order;"]
            done = ["\t*len = (size_t)(cur.p - buf);"]
        else:
            head += ["\tend = buf + cap;"]
            done = ["\t*len = (size_t)(p - buf);"]
        tail = ["out:", "\treturn rc;"]
        if "goto space" in "\n".join(body):
            tail += ["space:", "\trc = STUBRT_E_SPACE;", "\tgoto out;"]
        if v.startswith("inline") and "order" not in "\n".join(body):
            head.append("\t(void)order;")
        return head + body + done + tail + ["}"]

    def unmarshal_fn(self, v):
        p = self.prefix
        mv = v.split("_")[-1]
        body = []
        if v.startswith("inline"):
            for k, a in enumerate(self.proc.args):
                body += self.get(a, f"args->a{k + 1}", mv, 0, 1)
        elif v == "block":
            for k, a in enumerate(self.proc.args):
                body += self.get_block(a, f"args->a{k + 1}", 0, 1)
        else:
            for k, a in enumerate(self.proc.args):
                body += self.get_proc(a, f"args->a{k + 1}", mv, 0, 1)
        head = [f"int {p}_unmarshal_{v}(struct {p}_args *args, const uint8_t *buf, size_t len, size_t *used, "
                "int order)",
                "{", "\tint rc = STUBRT_OK;"]
        if v.startswith("proc"):
            head += ["\tstruct stubrt_rcursor cur, *const c = &cur;"]
            if "&v)" in "\n".join(body):
                head += ["\tuint32_t v;"]
            at = "cur.p"
        else:
            head += ["\tconst uint8_t *p = buf, *end;"]
            at = "p"
        head += ["",
                 "\tif (!args || !buf) {", "\t\trc = STUBRT_E_ARG;", "\t\tgoto out;", "\t}"]
        if v == "block":
            head += ["\tif (order != STUBRT_NATIVE) {", "\t\trc = STUBRT_E_ORDER;", "\t\tgoto out;", "\t}"]
        else:
            head += ["\tif (!stubrt_valid_order(order)) {", "\t\trc = STUBRT_E_ORDER;", "\t\tgoto out;", "\t}"]
        if v.startswith("proc"):
            head += ["\tcur.p = buf;", "\tcur.end = buf + len;", "\tcur.order = order;"]
            end_expr = "cur.end"
        else:
            head += ["\tend = buf + len;"]
            end_expr = "end"
        done = ["\tif (used) {", f"\t\t*used = (size_t)({at} - buf);",
                f"\t}} else if ({at} != {end_expr}) {{", "\t\trc = STUBRT_E_TRAILING;", "\t\tgoto out;", "\t}"]
        tail = ["out:", "\treturn rc;"]
        if "goto short_" in "\n".join(body):
            tail += ["short_:", "\trc = STUBRT_E_SHORT;", "\tgoto out;"]
        return head + body + done + tail + ["}"]


def generate(ifaces, outdir):
    """Write NAME_stubs.[ch] for each interface and stubreg.[ch]; return the paths."""
    os.makedirs(outdir, exist_ok=True)
    written = []
    names = {}
    for iface in ifaces:
        if iface.name in names:
            raise idl.IdlError(iface.path, 1, 1, f"interface '{iface.name}' is also defined in {names[iface.name]}")
        names[iface.name] = iface.path
        procs = [_Proc(iface, p) for p in iface.procedures]
        guard = f"{iface.name.upper()}_STUBS_H"
        banner = f"/* Generated by stubs/compiler.py from {iface.path}; do not edit. */\n"
        h = [banner, f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>",
             "", "#include \"stubrt.h\"", ""]
        for pr in procs:
            h.append(pr.header())
        h.append("#endif")
        c = [banner, f"#include \"{iface.name}_stubs.h\"", "", "#include <string.h>", ""]
        for pr in procs:
            c.append(pr.source())
        for ext, text in (("h", "\n".join(h) + "\n"), ("c", "\n".join(c))):
            path = os.path.join(outdir, f"{iface.name}_stubs.{ext}")
            _write(path, text)
            written.append(path)
    # The registry: every procedure of every interface, for drivers.
    allp = [(i, p) for i in ifaces for p in i.procedures]
    h = ["/* Generated by stubs/compiler.py; do not edit. */", "#ifndef STUBREG_H", "#define STUBREG_H", "",
         "#include \"stubrt.h\"", "", "extern const struct stubrt_proc *const stubreg_procs[];",
         "extern const size_t stubreg_nprocs;", "", "#endif", ""]
    c = ["/* Generated by stubs/compiler.py; do not edit. */", "#include \"stubreg.h\""]
    c += [f"#include \"{i.name}_stubs.h\"" for i in ifaces]
    c += ["", "const struct stubrt_proc *const stubreg_procs[] = {"]
    c += [f"\t&{i.name}_{p.name}_proc," for i, p in allp]
    c += ["};", f"const size_t stubreg_nprocs = {len(allp)};", ""]
    for name, lines in (("stubreg.h", h), ("stubreg.c", c)):
        path = os.path.join(outdir, name)
        _write(path, "\n".join(lines))
        written.append(path)
    return written


def _write(path, text):
    # Only touch files whose content changed, so make does not rebuild needlessly.
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="stubs/compiler.py", description="Generate C client and server stubs from interface files.",
        epilog="example:\n  python3 stubs/compiler.py -o build/stubs stubs/idl/chung.idl stubs/idl/calib.idl",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--outdir", required=True, help="directory for the generated C")
    ap.add_argument("idl", nargs="+", help="interface files")
    args = ap.parse_args(argv)
    try:
        ifaces = [idl.parse_file(p) for p in args.idl]
        generate(ifaces, args.outdir)
    except idl.IdlError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"stubs/compiler.py: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
