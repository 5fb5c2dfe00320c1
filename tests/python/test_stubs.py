"""Tests for stubs/: the interface compiler's errors, the generated C
(compiled with -Werror by gcc and clang, then round-tripped through every
variant by stubs/runtime/stubtest_main.c), and the cost model's equations."""
import os
import shutil
import subprocess
import sys

import pytest

from rpcscope.stubs import compiler, idl, model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RT = os.path.join(REPO, "stubs", "runtime")
IDLS = [os.path.join(REPO, "stubs", "idl", n) for n in ("chung.idl", "calib.idl")]
WARN = ["-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11"]

# Nesting the paper's workloads do not reach: arrays of arrays, arrays of
# records holding strings, padding after odd-sized strings.
NESTED = """interface nest;
procedure grid (A[3] A[2] I);
procedure people (A[4] (I S<5> I) S<3>);
procedure deep ((I (I (A[2] (I I)) S<1>)) A[2] A[2] (S<2> I));
"""


def _err(text, path="t.idl"):
    with pytest.raises(idl.IdlError) as ei:
        idl.parse(text, path)
    return ei.value


# ---------------------------------------------------------------- parser

def test_paper_notation_parses():
    iface = idl.parse_file(IDLS[0])
    names = [p.name for p in iface.procedures]
    assert names == ["one_int", "int_array", "structure"]
    one, arr, st = iface.procedures
    assert one.args == (idl.Int(),)
    assert arr.args == (idl.Arr(256, idl.Int()),)
    # (I) is an integer, (A[86] (I I I)) an array of records, (I S<1024>) a record.
    assert st.args == (idl.Int(), idl.Int(), idl.Int(), idl.Arr(256, idl.Int()),
                       idl.Arr(86, idl.Rec((idl.Int(),) * 3)), idl.Rec((idl.Int(), idl.Str(1024))))
    assert st.text == "((I) (I) (I) (A[256] I) (A[86] (I I I)) (I S<1024>))"


@pytest.mark.parametrize("text,line,col,fragment", [
    ("procedure p (I)", 1, 16, "expected ';' after the argument list of 'p', found end of file"),
    ("procedure p (I);\nprocedure p (I);", 2, 11, "procedure 'p' is already defined on line 1"),
    ("procedure p (A[0] I);", 1, 16, "the array's element count must be between 1 and"),
    ("procedure p (A[256 I);", 1, 20, "expected ']' after the array's element count, found 'I'"),
    ("procedure p (A[4]);", 1, 18, "expected the array's element type, found ')'"),
    ("procedure p (S<>);", 1, 16, "expected the string's maximum length, found '>'"),
    ("procedure p (I X);", 1, 16, "unknown type 'X'"),
    ("procedure p (I ());", 1, 16, "empty record '()'"),
    ("procedure p ((I I);", 1, 19, "unterminated argument list opened at 1:13"),
    ("procedure p ((I I;", 1, 18, "unterminated record opened at 1:14"),
    ("procedure p ();", 1, 14, "needs at least one argument"),
    ("procedure int (I);", 1, 11, "'int' is reserved"),
    ("procedure p (I); $", 1, 18, "unexpected character '$'"),
    ("\n\n  procedure p (I) ;\n  procedure q [I];", 4, 15, "expected '(' to start the argument list of 'q', found '['"),
    ("# only a comment\n", 2, 1, "the interface defines no procedures"),
    ("procedure p (A[1048576] A[1048576] I);", 1, 11, "more than the limit"),
])
def test_errors_have_line_and_column(text, line, col, fragment):
    e = _err(text)
    assert (e.line, e.col) == (line, col), str(e)
    assert fragment in e.msg, str(e)
    first = str(e).splitlines()[0]
    assert first.startswith(f"t.idl:{line}:{col}: error: ")
    # The offending line is quoted with a caret under the column.
    lines = str(e).splitlines()
    if len(lines) == 3:
        assert lines[2].index("^") == col + 1


def test_compiler_cli_reports_errors(tmp_path):
    bad = tmp_path / "bad.idl"
    bad.write_text("procedure ok (I);\nprocedure bad (A[3] );\n")
    r = subprocess.run([sys.executable, os.path.join(REPO, "stubs", "compiler.py"), "-o", str(tmp_path / "out"),
                        str(bad)], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{bad}:2:21: error: expected the array's element type, found ')'" in r.stderr
    assert not (tmp_path / "out" / "bad_stubs.c").exists()


def test_layout_matches_c():
    # The interpreter and the static asserts rely on these numbers.
    assert idl.layout(idl.Str(5)) == (12, 4)
    assert idl.record_layout((idl.Int(), idl.Str(1024)))[:2] == (1032, 4)
    st = idl.parse_file(IDLS[0]).procedures[2]
    assert idl.record_layout(st.args)[0] == 12 + 1024 + 86 * 12 + 1032
    assert idl.wire_max(idl.Rec(st.args)) == 3108


# ---------------------------------------------------------------- generated C

def _build(tmp_path, cc, extra_idl=None):
    idls = list(IDLS)
    if extra_idl:
        p = tmp_path / "nest.idl"
        p.write_text(extra_idl)
        idls.append(str(p))
    out = tmp_path / "gen"
    compiler.generate([idl.parse_file(p) for p in idls], str(out))
    gen = sorted(str(p) for p in out.glob("*.c"))
    exe = tmp_path / f"stubtest-{cc}"
    cmd = [cc] + WARN + ["-I", RT, "-I", str(out), "-o", str(exe), os.path.join(RT, "stubtest_main.c"),
                         os.path.join(RT, "interp.c"), os.path.join(RT, "stubrt.c")] + gen
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return exe


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_generated_code_compiles_with_werror_and_round_trips(tmp_path, cc):
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    exe = _build(tmp_path, cc, NESTED)
    r = subprocess.run([str(exe), "-n", "20", "-s", "12345"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "12 procedures" in r.stdout and " 0 failures" in r.stdout, r.stdout


def test_round_trip_catches_a_broken_stub(tmp_path):
    """The round-trip test must fail when a generated unmarshaller is wrong."""
    out = tmp_path / "gen"
    compiler.generate([idl.parse_file(p) for p in IDLS], str(out))
    src = (out / "chung_stubs.c").read_text()
    assert "if (v != 86u) {" in src
    (out / "chung_stubs.c").write_text(src.replace("if (v != 86u) {", "if (v != 85u) {", 1))
    gen = sorted(str(p) for p in out.glob("*.c"))
    exe = tmp_path / "broken"
    subprocess.run(["gcc"] + WARN + ["-I", RT, "-I", str(out), "-o", str(exe), os.path.join(RT, "stubtest_main.c"),
                    os.path.join(RT, "interp.c"), os.path.join(RT, "stubrt.c")] + gen, check=True)
    r = subprocess.run([str(exe), "-n", "2"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "chung_structure compiled proc-" in r.stderr


# ---------------------------------------------------------------- cost model

def test_table5_equations_for_int_array():
    args = (idl.Arr(256, idl.Int()),)
    c = model.counts(args, "compiled", "inline-byte")
    assert {k: v for k, v in c.items() if v} == {"s": 1, "L_b": 257, "f": 256}
    c = model.counts(args, "compiled", "proc-item")
    assert {k: v for k, v in c.items() if v} == {"s": 1, "s_p": 1, "L_i": 257, "p": 257, "f": 256}
    c = model.counts(args, "compiled", "block")
    assert {k: v for k, v in c.items() if v} == {"s": 1, "L_i": 1, "alpha": 1, "beta": 1024}
    # Interpreted: the compiled equation plus B + A + e (+ e for the argument record).
    c = model.counts(args, "interpreted", "inline-item")
    assert {k: v for k, v in c.items() if v} == {"s": 1, "B": 1, "A": 1, "e": 2, "L_i": 257, "f": 256}


def test_fit_recovers_known_parameters():
    procs = [p for f in IDLS for p in idl.parse_file(f).procedures]
    truth = dict(zip(model.PARAMS, [1.5, 0.7, 2.0, 0.6, 0.3, 0.2, 0.4, 5.0, 0.01, 1.0, 1.2, 3.0]))
    rows = [(c, model.estimate(c, truth)) for p in procs for stub in ("compiled", "interpreted")
            for v in model.VARIANTS for c in [model.counts(p.args, stub, v)]]
    got = model.fit(rows)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-3, abs=1e-6), k


def test_cli_help_has_examples():
    r = subprocess.run([sys.executable, "-m", "rpcscope.cli", "stubs", "bench", "--help"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert "examples:" in r.stdout and "rpcscope stubs bench --json" in r.stdout
