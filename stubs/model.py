"""The analytic cost model of Chung et al. (Tables 5 and 6), for any interface.

A marshalling cost is a linear combination of per-operation costs. The paper
wrote the equations by hand for (A[256] I); here they are derived from the
type tree by walking it exactly as the generated stubs
(stubs/compiler.py) and the interpreter (stubs/runtime/interp.c) do, so
every (procedure, stub kind, variant) cell gets a vector of operation counts.
The parameters are then fitted to this machine's measurements (bench.py).

Parameters, in ns on this machine (the paper's, in us, in Table 6):
    s      stub entry and exit: the call, argument checks, return   (new here)
    L_b    move an integer by byte copy, with its buffer check
    L_i    move an integer by item copy, with its buffer check
    L_c    move one character of a string, byte or item copy        (new here)
    f      for-loop bookkeeping, per array element
    p      call of a marshalling procedure
    alpha  block copy initial overhead, per memcpy
    beta   block copy per byte; b(n) = beta * n
    B      initial setup for the interpreter, per call
    A      initial setup for an array in the interpreter
    e      processing one type specification code in the interpreter
The paper folded the stub's entry cost into its per-item costs and moved a
string as longwords; the two new parameters make those explicit.
"""
if __package__ in (None, ""):
    import idl  # noqa: F401  (run from stubs/)
else:
    from . import idl

Int, Str, Arr, Rec = idl.Int, idl.Str, idl.Arr, idl.Rec

PARAMS = ["s", "s_p", "L_b", "L_i", "L_c", "f", "p", "alpha", "beta", "B", "A", "e"]

PARAM_MEANING = {
    "s": "stub entry and exit (call, checks, return)",
    "s_p": "procedural stub setup: the cursor kept in memory",
    "L_b": "move a long integer by byte copy",
    "L_i": "move a long integer by item copy",
    "L_c": "move one string character",
    "f": "for-loop bookkeeping",
    "p": "call for a marshalling procedure",
    "alpha": "block copy initial overhead",
    "beta": "block copy, per byte",
    "B": "initial setup for the interpreter",
    "A": "initial setup for an array in the interpreter",
    "e": "processing an elementary type specification code",
}

VARIANTS = ["inline-byte", "inline-item", "proc-byte", "proc-item", "block"]


def _blittable(t):
    # Must match compiler.blittable: integers and unpadded records of them.
    if isinstance(t, Int):
        return True
    if isinstance(t, Rec):
        size, _, _ = idl.record_layout(t.fields)
        return all(_blittable(f) for f in t.fields) and size == sum(idl.layout(f)[0] for f in t.fields)
    return False


class _Counter:
    def __init__(self):
        self.c = dict.fromkeys(PARAMS, 0)

    def add(self, k, n=1):
        self.c[k] += n


def _compiled(t, variant, k, full=True):
    """Counts for the compiled stub's code for one value of type t."""
    L = "L_b" if variant.endswith("byte") else "L_i"
    proc = variant.startswith("proc")
    if variant == "block":
        if isinstance(t, Int):
            k.add("L_i")
        elif isinstance(t, Str):
            k.add("L_i")
            k.add("alpha")
            k.add("beta", t.max if full else 0)
        elif isinstance(t, Arr) and _blittable(t.elem):
            k.add("L_i")
            k.add("alpha")
            k.add("beta", t.count * idl.layout(t.elem)[0])
        elif isinstance(t, Arr):
            k.add("L_i")
            for _ in range(t.count):
                k.add("f")
                _compiled(t.elem, variant, k, full)
        elif _blittable(t):
            k.add("alpha")
            k.add("beta", idl.layout(t)[0])
        else:
            for f in t.fields:
                _compiled(f, variant, k, full)
        return
    if isinstance(t, Int):
        k.add(L)
        if proc:
            k.add("p")
    elif isinstance(t, Str):
        k.add(L)
        k.add("L_c", t.max if full else 0)
        if proc:
            k.add("p")
    elif isinstance(t, Arr):
        _compiled(Int(), variant, k, full)
        k.add("f", t.count)
        for _ in range(t.count):
            _compiled(t.elem, variant, k, full)
    else:
        if proc:
            k.add("p")  # the factored record procedure
        for f in t.fields:
            _compiled(f, variant, k, full)


def _interp(t, variant, k, full=True):
    """Counts for the interpreter's walk over one value of type t."""
    L = "L_i" if variant in ("inline-item", "proc-item", "block") else "L_b"
    proc = variant.startswith("proc")
    k.add("e")  # one visit of put(): one type code decoded
    if isinstance(t, Int):
        k.add(L)
        if proc:
            k.add("p")
    elif isinstance(t, Str):
        k.add(L)
        if variant == "block":
            k.add("alpha")
            k.add("beta", t.max if full else 0)
        else:
            k.add("L_c", t.max if full else 0)
        if proc:
            k.add("p")
    elif isinstance(t, Arr):
        k.add("A")
        k.add(L)  # the count
        if proc:
            k.add("p")
        if isinstance(t.elem, Int):
            if variant == "block":
                k.add("alpha")
                k.add("beta", 4 * t.count)
            else:
                k.add(L, t.count)
                k.add("f", t.count)
                if proc:
                    k.add("p", t.count)
        else:
            k.add("f", t.count)
            for _ in range(t.count):
                _interp(t.elem, variant, k, full)
    else:
        for f in t.fields:
            _interp(f, variant, k, full)


def counts(args, stub, variant):
    """Operation counts for marshalling an argument list (tuple of types),
    stub 'compiled' or 'interpreted', with strings at full length (the
    bench's values)."""
    k = _Counter()
    k.add("s")
    if stub == "compiled" and variant.startswith("proc"):
        k.add("s_p")
    if stub == "compiled":
        for a in args:
            _compiled(a, variant, k)
    else:
        k.add("B")
        _interp(Rec(tuple(args)), variant, k)
    return k.c


def estimate(cnt, theta):
    return sum(cnt[p] * theta.get(p, 0.0) for p in PARAMS)


# ---------------------------------------------------------------- fitting

def fit(rows, params=PARAMS, minimax=False):
    """Non-negative least squares on relative error.

    rows: list of (counts dict, measured). Minimises sum(((est - m) / m)^2)
    over theta >= 0 (Lawson-Hanson active set), so that a 2 ns cell weighs as
    much as a 2 us one, as the paper's percentage comparisons do; with
    minimax, then moves towards the smallest largest relative error.
    Returns a dict param -> value; parameters no row uses are 0."""
    used = [p for p in params if any(c[p] for c, _ in rows)]
    X = [[c[p] / m for p in used] for c, m in rows]
    y = [1.0 for _ in rows]
    theta = _nnls(X, y)
    if minimax:
        # Damped reweighting towards the smallest largest relative error
        # (the criterion the tables report): weight each row by its error
        # plus a floor, refit, and keep a step only if the worst row improved.
        def worst(th):
            return max(abs(1.0 - sum(a * t for a, t in zip(row, th))) for row in X)
        w = [1.0] * len(X)
        best, best_err = theta, worst(theta)
        for _ in range(40):
            r = [abs(1.0 - sum(a * t for a, t in zip(row, best))) for row in X]
            w = [wi * (ri + 0.02) for wi, ri in zip(w, r)]
            top = max(w)
            w = [wi / top for wi in w]
            sw = [wi ** 0.5 for wi in w]
            cand = _nnls([[a * q for a in row] for row, q in zip(X, sw)], sw)
            err = worst(cand)
            if err < best_err:
                best, best_err = cand, err
        theta = best
    out = dict.fromkeys(params, 0.0)
    out.update(zip(used, theta))
    return out


def _lstsq(X, y, cols):
    """Least squares restricted to columns cols, by normal equations with
    column scaling (the problem is tiny: a dozen unknowns)."""
    n = len(cols)
    scale = [max(1e-300, sum(r[j] ** 2 for r in X) ** 0.5) for j in cols]
    A = [[sum(r[a] * r[b] for r in X) / (scale[i] * scale[j]) for j, b in enumerate(cols)] for i, a in enumerate(cols)]
    b = [sum(r[a] * yy for r, yy in zip(X, y)) / scale[i] for i, a in enumerate(cols)]
    # Gaussian elimination with partial pivoting; a tiny ridge keeps a
    # column that the data cannot pin down from blowing up.
    for i in range(n):
        A[i][i] += 1e-12
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(A[r][i]))
        A[i], A[piv] = A[piv], A[i]
        b[i], b[piv] = b[piv], b[i]
        if abs(A[i][i]) < 1e-300:
            continue
        for r in range(i + 1, n):
            f = A[r][i] / A[i][i]
            if f:
                for c in range(i, n):
                    A[r][c] -= f * A[i][c]
                b[r] -= f * b[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        s = b[i] - sum(A[i][c] * x[c] for c in range(i + 1, n))
        x[i] = s / A[i][i] if abs(A[i][i]) > 1e-300 else 0.0
    return [x[i] / scale[i] for i in range(n)]


def _nnls(X, y, max_iter=200):
    m, n = len(X), len(X[0])
    P, x = [], [0.0] * n

    def resid(x):
        return [yy - sum(r[j] * x[j] for j in range(n)) for r, yy in zip(X, y)]

    for _ in range(max_iter):
        r = resid(x)
        w = [sum(X[i][j] * r[i] for i in range(m)) for j in range(n)]
        cand = [j for j in range(n) if j not in P and w[j] > 1e-12]
        if not cand:
            break
        P.append(max(cand, key=lambda j: w[j]))
        while True:
            z = [0.0] * n
            for j, v in zip(P, _lstsq(X, y, P)):
                z[j] = v
            if all(z[j] > 0 for j in P):
                x = z
                break
            alpha = min(x[j] / (x[j] - z[j]) for j in P if z[j] <= 0)
            x = [x[j] + alpha * (z[j] - x[j]) for j in range(n)]
            P = [j for j in P if x[j] > 1e-12]
            for j in range(n):
                if j not in P:
                    x[j] = 0.0
    return x
