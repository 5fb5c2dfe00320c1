"""Parser for the interface description language of Chung et al.

The paper writes argument lists as `(I)`, `(A[256] I)` and
`((I) (I) (I) (A[256] I) (A[86] (I I I)) (I S<1024>))`. An interface file
names procedures with that notation:

    # comment to end of line
    interface chung;                 # optional; defaults to the file's stem
    procedure one_int (I);
    procedure structure ((I) (I) (A[86] (I I I)) (I S<1024>));

Types:
    I          a 32-bit integer (the paper's long)
    S<n>       a counted string of at most n bytes (1 <= n)
    A[n] T     an array of exactly n elements of type T (1 <= n)
    (T T ...)  a record of two or more fields; a list of one type is that
               type itself (the paper's "(I)" argument is an integer)

Every error is an IdlError whose message starts with FILE:LINE:COL.
"""
import os
import re
from dataclasses import dataclass, field

# Limits keep every generated value and message small enough to marshal in
# memory and keep a typo like A[99999999999] from producing a giant struct.
MAX_COUNT = 1 << 20
MAX_VALUE_BYTES = 16 << 20
MAX_DEPTH = 32


class IdlError(Exception):
    """A bad interface file; str() is 'file:line:col: error: msg' plus the line and a caret."""

    def __init__(self, path, line, col, msg, source_line=None):
        self.path, self.line, self.col, self.msg = path, line, col, msg
        text = f"{path}:{line}:{col}: error: {msg}"
        if source_line is not None:
            text += "\n  " + source_line.rstrip("\n") + "\n  " + " " * (col - 1) + "^"
        super().__init__(text)


# ---------------------------------------------------------------- types

@dataclass(frozen=True)
class Int:
    def notation(self):
        return "I"


@dataclass(frozen=True)
class Str:
    max: int

    def notation(self):
        return f"S<{self.max}>"


@dataclass(frozen=True)
class Arr:
    count: int
    elem: object

    def notation(self):
        return f"A[{self.count}] {self.elem.notation()}"


@dataclass(frozen=True)
class Rec:
    fields: tuple

    def notation(self):
        return "(" + " ".join(f.notation() for f in self.fields) + ")"


@dataclass
class Procedure:
    name: str
    args: tuple          # of types; a record of the arguments, laid out like one
    text: str            # the argument list exactly as written, for the interpreter
    line: int

    def notation(self):
        return "(" + " ".join(a.notation() for a in self.args) + ")"


@dataclass
class Interface:
    name: str
    path: str
    procedures: list = field(default_factory=list)


# C layout, as gcc lays out the structs the compiler generates. The
# interpreter (stubs/runtime/interp.c) computes the same numbers at run time;
# generated code asserts them with _Static_assert.
def layout(t):
    """(size, align) in bytes of type t's C representation."""
    if isinstance(t, Int):
        return 4, 4
    if isinstance(t, Str):
        return _round(4 + t.max, 4), 4
    if isinstance(t, Arr):
        s, a = layout(t.elem)
        return s * t.count, a
    if isinstance(t, Rec):
        return record_layout(t.fields)[:2]
    raise TypeError(t)


def record_layout(fields):
    """(size, align, offsets) of a struct with these members."""
    off, align, offs = 0, 1, []
    for f in fields:
        s, a = layout(f)
        off = _round(off, a)
        offs.append(off)
        off += s
        align = max(align, a)
    return _round(off, align), align, offs


def wire_max(t):
    """Largest number of bytes the value can take on the wire."""
    if isinstance(t, Int):
        return 4
    if isinstance(t, Str):
        return 4 + t.max
    if isinstance(t, Arr):
        return 4 + t.count * wire_max(t.elem)
    return sum(wire_max(f) for f in t.fields)


def _round(n, a):
    return (n + a - 1) // a * a


# ---------------------------------------------------------------- lexer and parser

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+) | (?P<nl>\n) | (?P<comment>\#[^\n]*)
  | (?P<num>[0-9]+) | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\]<>;])
""", re.VERBOSE)

_KEYWORDS = {"interface", "procedure"}
_C_RESERVED = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while",
}


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int
    pos: int


class _Parser:
    def __init__(self, text, path):
        self.text, self.path = text, path
        self.lines = text.split("\n")
        self.toks = self._lex()
        self.i = 0

    def error(self, tok_or_pos, msg):
        if isinstance(tok_or_pos, _Tok):
            line, col = tok_or_pos.line, tok_or_pos.col
        else:
            line, col = tok_or_pos
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return IdlError(self.path, line, col, msg, src)

    def _lex(self):
        toks, pos, line, line_start = [], 0, 1, 0
        while pos < len(self.text):
            m = _TOKEN.match(self.text, pos)
            if not m:
                ch = self.text[pos]
                raise self.error((line, pos - line_start + 1), f"unexpected character {ch!r}")
            kind = m.lastgroup
            if kind == "nl":
                line, line_start = line + 1, m.end()
            elif kind not in ("ws", "comment"):
                toks.append(_Tok(kind, m.group(), line, pos - line_start + 1, pos))
            pos = m.end()
        toks.append(_Tok("eof", "end of file", line, pos - line_start + 1, pos))
        return toks

    # -- helpers
    def peek(self):
        return self.toks[self.i]

    def next(self):
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def expect(self, text, what):
        t = self.next()
        if t.text != text or t.kind == "eof":
            raise self.error(t, f"expected {what}, found {_describe(t)}")
        return t

    def number(self, what):
        t = self.next()
        if t.kind != "num":
            raise self.error(t, f"expected {what}, found {_describe(t)}")
        n = int(t.text)
        if not 1 <= n <= MAX_COUNT:
            raise self.error(t, f"{what} must be between 1 and {MAX_COUNT}, not {n}")
        return n

    # -- grammar
    def interface(self):
        name = os.path.splitext(os.path.basename(self.path))[0]
        if self.peek().text == "interface":
            self.next()
            t = self.next()
            name = self.identifier(t, "an interface name")
            self.expect(";", "';' after the interface name")
        iface = Interface(name=name, path=self.path)
        seen = {}
        while self.peek().kind != "eof":
            t = self.next()
            if t.text != "procedure":
                raise self.error(t, f"expected 'procedure', found {_describe(t)}")
            nt = self.next()
            pname = self.identifier(nt, "a procedure name")
            if pname in seen:
                raise self.error(nt, f"procedure '{pname}' is already defined on line {seen[pname]}")
            seen[pname] = nt.line
            lp = self.peek()
            if lp.text != "(":
                raise self.error(lp, f"expected '(' to start the argument list of '{pname}', found {_describe(lp)}")
            args = self.arglist()
            end = self.toks[self.i - 1]
            text = self.text[lp.pos:end.pos + 1]
            self.expect(";", f"';' after the argument list of '{pname}'")
            proc = Procedure(name=pname, args=tuple(args), text=" ".join(text.split()), line=nt.line)
            size = record_layout(proc.args)[0]
            if size > MAX_VALUE_BYTES or wire_max(Rec(proc.args)) > MAX_VALUE_BYTES:
                raise self.error(nt, f"procedure '{pname}' takes {size} bytes, more than the limit of "
                                     f"{MAX_VALUE_BYTES}")
            iface.procedures.append(proc)
        if not iface.procedures:
            raise self.error(self.peek(), "the interface defines no procedures")
        return iface

    def identifier(self, t, what):
        if t.kind != "ident":
            raise self.error(t, f"expected {what}, found {_describe(t)}")
        if t.text in _KEYWORDS or t.text in _C_RESERVED or t.text in ("I", "A", "S"):
            raise self.error(t, f"'{t.text}' is reserved and cannot be {what}")
        if len(t.text) > 64:
            raise self.error(t, f"{what} is longer than 64 characters")
        return t.text

    def arglist(self):
        """'(' type* ')' at the top level: the arguments (possibly none)."""
        lp = self.expect("(", "'('")
        args = []
        while self.peek().text != ")":
            if self.peek().kind == "eof" or self.peek().text == ";":
                raise self.error(self.peek(), f"unterminated argument list opened at {lp.line}:{lp.col}: expected ')'")
            args.append(self.type(1))
        rp = self.next()
        if not args:
            raise self.error(rp, "a procedure needs at least one argument")
        return args

    def type(self, depth):
        t = self.peek()
        if depth > MAX_DEPTH:
            raise self.error(t, f"types nest deeper than {MAX_DEPTH} levels")
        if t.text == "I":
            self.next()
            return Int()
        if t.text == "S":
            self.next()
            self.expect("<", "'<' after S (strings are written S<max>)")
            n = self.number("the string's maximum length")
            self.expect(">", "'>' after the string's maximum length")
            return Str(n)
        if t.text == "A":
            self.next()
            self.expect("[", "'[' after A (arrays are written A[count] type)")
            n = self.number("the array's element count")
            self.expect("]", "']' after the array's element count")
            if self.peek().text in (")", ";") or self.peek().kind == "eof":
                raise self.error(self.peek(), f"expected the array's element type, found {_describe(self.peek())}")
            return Arr(n, self.type(depth + 1))
        if t.text == "(":
            self.next()
            fields = []
            while self.peek().text != ")":
                if self.peek().kind == "eof" or self.peek().text == ";":
                    raise self.error(self.peek(), f"unterminated record opened at {t.line}:{t.col}: expected ')'")
                fields.append(self.type(depth + 1))
            self.next()
            if not fields:
                raise self.error(t, "empty record '()': a record needs at least one field")
            return fields[0] if len(fields) == 1 else Rec(tuple(fields))
        if t.kind == "ident":
            raise self.error(t, f"unknown type '{t.text}': expected I, S<n>, A[n] type or a record (...)")
        raise self.error(t, f"expected a type, found {_describe(t)}")


def _describe(t):
    if t.kind == "eof":
        return "end of file"
    return f"'{t.text}'"


def parse(text, path="<string>"):
    """Parse an interface file's text; raise IdlError on any mistake."""
    return _Parser(text, path).interface()


def parse_file(path):
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), path)


def parse_type_list(text, path="<string>"):
    """Parse one argument list such as '(A[256] I)'; return the tuple of argument types."""
    p = _Parser(text, path)
    args = p.arglist()
    if p.peek().kind != "eof":
        raise p.error(p.peek(), f"unexpected {_describe(p.peek())} after the argument list")
    return tuple(args)
