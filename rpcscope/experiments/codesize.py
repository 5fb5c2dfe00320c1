"""Code size of each system's client and server (the Netwise study's second table), from the built
objects and the shared libraries the programs load: text + data bytes as `size` reports them.

    application   the program's own code: the peers' client (with peerbench.c, the harness every
                  client shares) and server; the reference RPC's benchmark front end (rpc/bench.c)
                  for its client (its mains are compiled into the programs, not counted)
    generated     rpcgen's stubs and XDR routines; protoc's messages and gRPC stubs; the reference
                  RPC's hand-written stubs (rpc/procs.c)
    libraries     the RPC runtime: the shared libraries the peer's program loads, but for the C and
                  C++ runtimes; the reference RPC's runtime objects, linked statically

The paper measured a minimal void client and server; these programs carry a benchmark harness,
which the application row includes.
"""
import pathlib
import re
import shutil
import subprocess

from .. import ROOT
from ..output import UserError
from .systems import NOTRACE_BIN, PEERS_BIN

OBJ = ROOT / "build" / "peers" / "obj"
REF_OBJ = ROOT / "build" / "notrace" / "obj"
C_RUNTIME = ("linux-vdso", "libc.so", "libm.so", "libstdc++", "libgcc_s", "ld-linux", "libpthread", "libdl.so",
             "librt.so")
REF_RUNTIME = {"client": ("client", "xport", "reasm", "wire", "marshal", "util"),
               "server": ("server", "replycache", "xport", "reasm", "wire", "marshal", "util")}
PEER_FILES = {
    ("tirpc", "client"): (["tirpc_client.o", "peerbench.o"], ["gen_peer_clnt.o", "gen_peer_xdr.o"], "tirpc-client"),
    ("tirpc", "server"): (["tirpc_server.o", "peerbench.o"], ["gen_peer_svc.o", "gen_peer_xdr.o"], "tirpc-server"),
    ("grpc", "client"): (["grpc_client.o", "peerbench.o"], ["gen_peer.pb.o", "gen_peer.grpc.pb.o"], "grpc-client"),
    ("grpc", "server"): (["grpc_server.o", "peerbench.o"], ["gen_peer.pb.o", "gen_peer.grpc.pb.o"], "grpc-server"),
}


def _size(paths):
    """text + data bytes of the files (objects or shared libraries)."""
    if not paths:
        return 0
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UserError(f"{missing[0]} is missing: run `make peers` and `make TRACE=0`")
    out = subprocess.run(["size", *map(str, paths)], capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise UserError(f"size failed: {out.stderr.strip()[-200:]}")
    total = 0
    for line in out.stdout.splitlines()[1:]:
        f = line.split()
        total += int(f[0]) + int(f[1])
    return total


def _libraries(program):
    """The shared libraries the program loads, but for the C and C++ runtimes."""
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, timeout=60)
    libs = []
    for m in re.finditer(r"^\s*(\S+)\s+=>\s+(\S+)", out.stdout, re.M):
        if not any(m.group(1).startswith(c) for c in C_RUNTIME):
            libs.append(m.group(2))
    return sorted(set(libs))


def measure():
    """{system: {client|server: {application, generated, libraries, total, library_files}}}."""
    if not shutil.which("size") or not shutil.which("ldd"):
        raise UserError("size and ldd are needed for the code sizes: install binutils and libc-bin")
    out = {"rpcscope": {}, "tirpc": {}, "grpc": {}}
    for side in ("client", "server"):
        app = [REF_OBJ / "bench.o"] if side == "client" else []
        lib = [REF_OBJ / f"{m}.o" for m in REF_RUNTIME[side]]
        libs_so = _libraries(NOTRACE_BIN / f"rpc-{side}")
        d = {"application": _size(app), "generated": _size([REF_OBJ / "procs.o"]),
             "libraries": _size(lib) + _size([pathlib.Path(p) for p in libs_so]), "library_files": libs_so}
        d["total"] = d["application"] + d["generated"] + d["libraries"]
        out["rpcscope"][side] = d
    for (system, side), (app, gen, prog) in PEER_FILES.items():
        libs_so = _libraries(PEERS_BIN / prog)
        d = {"application": _size([OBJ / f for f in app]), "generated": _size([OBJ / f for f in gen]),
             "libraries": _size([pathlib.Path(p) for p in libs_so]), "library_files": libs_so}
        d["total"] = d["application"] + d["generated"] + d["libraries"]
        out[system][side] = d
    return out
