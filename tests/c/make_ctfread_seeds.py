"""Seeds for tests/c/fuzz_ctfread.c: one file per stream of a handful of small traces, each as the
fuzz target reads its input (4-byte little-endian metadata length, the metadata, the stream).

    python tests/c/make_ctfread_seeds.py OUT_DIR

The traces: the committed real captures of tests/python/fixtures/run-udp-small (LTTng-UST with
its packetized metadata, perf's converted CTF) and the synthetic ones that
tests/python/fixtures/make_ctf.py writes with bt2's sink.ctf.fs (LTTng-kernel names, lost events,
several packets)."""
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE.parent / "python" / "fixtures"
MAX = 80_000          # the fuzz target's -max_len


def seeds(trace_dir, label):
    metadata = (trace_dir / "metadata").read_bytes()
    for f in sorted(trace_dir.iterdir()):
        if f.name != "metadata" and f.is_file() and f.stat().st_size:
            data = len(metadata).to_bytes(4, "little") + metadata + f.read_bytes()
            if len(data) <= MAX:
                yield f"{label}-{f.name}", data


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    real = FIXTURES / "run-udp-small" / "cases"
    dirs = [(m.parent, "-".join(m.parent.relative_to(real).parts[:2])) for m in sorted(real.rglob("metadata"))]
    sys.path.insert(0, str(FIXTURES))
    import make_ctf
    with tempfile.TemporaryDirectory() as tmp:
        synth = make_ctf.write_all(pathlib.Path(tmp))
        dirs += [(synth / n, f"synthetic-{n}") for n in ("lttng-kernel", "perf", "ust-client", "discarded")]
        n = 0
        for d, label in dirs:
            for name, data in seeds(d, label):
                (out / name).write_bytes(data)
                n += 1
    print(f"make_ctfread_seeds: {n} seeds in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
