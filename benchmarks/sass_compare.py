"""Whether two builds of the library run the same machine code: the SASS of every kernel, instruction for instruction.

    python -m benchmarks.sass_compare --base REV [--head REV] [--arch 90] [--cuobjdump PATH] [--keep DIR]

Builds native/ of REV (git archive) and of HEAD REV (default: the working tree) with the real `./build.sh OUT ARCH`
(its flags, so nothing drifts from the shipped build), disassembles both libraries with `cuobjdump -sass`, and lists
each kernel: its instruction count in both builds and whether the two listings are identical (addresses and encodings
aside). A refactor whose kernels all come out identical needs no GPU run to show it keeps the bytes or the speed:
the GPU would run the same instructions. Exit status 0 when every kernel is identical and both builds hold the same
kernels, 1 otherwise, 2 when a build or the disassembly fails.

cuobjdump: --cuobjdump, else $CUOBJDUMP, else on PATH, else $CUDA_HOME/bin; the CPU machines lack it in their
toolkit, and the `nvidia-cuda-cuobjdump` wheel from PyPI has it (`pip download nvidia-cuda-cuobjdump --no-deps`,
unzip, `nvidia/cu13/bin/cuobjdump`). build.sh finds cuBLAS as usual (CS1_CUBLAS_DIR on the CPU machines).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
# an anonymous namespace's mangled name holds hashes of the file's build path: the same kernel built from two folders
_ANONYMOUS = re.compile(r"_ZN\d+_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_cu_[0-9a-f]{8}")


def parse_sass(text: str) -> dict[str, list[str]]:
    """Kernel name (an anonymous namespace written as its file) -> its instructions (text without address or
    encoding), from `cuobjdump -sass` output."""
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            current = kernels.setdefault(_ANONYMOUS.sub(r"_ZN(\1.cu)", m.group(1)), [])
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current.append(" ".join(m.group(1).split()))
    return kernels


def compare(base: dict[str, list[str]], head: dict[str, list[str]]) -> tuple[list[tuple], bool]:
    """Rows (kernel, base count or None, head count or None, verdict) and whether every kernel is identical."""
    rows = []
    same = True
    for name in sorted(set(base) | set(head)):
        a, b = base.get(name), head.get(name)
        if a is None or b is None:
            verdict = "only in head" if a is None else "only in base"
            same = False
        elif a == b:
            verdict = "identical"
        else:
            verdict = "DIFFERENT"
            same = False
        rows.append((name, None if a is None else len(a), None if b is None else len(b), verdict))
    return rows, same


def find_cuobjdump(explicit: str | None) -> str:
    for candidate in (explicit, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "cuobjdump")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("sass_compare: no cuobjdump (see --help: the nvidia-cuda-cuobjdump wheel has one)")


def build(tree: Path, arch: str, out: Path) -> Path:
    """./build.sh of `tree` into `out`; the library's path."""
    r = subprocess.run(["bash", str(tree / "build.sh"), str(out), arch], cwd=tree, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(2)
    return out / "libqwen3_5_cuda.so"


def disassemble(cuobjdump: str, lib: Path) -> dict[str, list[str]]:
    r = subprocess.run([cuobjdump, "-sass", str(lib)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        raise SystemExit(2)
    return parse_sass(r.stdout)


def checkout(rev: str, into: Path) -> Path:
    """native/ and build.sh of commit `rev` into a fresh folder."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "native", "build.sh"], capture_output=True)
    if archive.returncode != 0:
        sys.stderr.write(archive.stderr.decode())
        raise SystemExit(2)
    subprocess.run(["tar", "x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare against")
    ap.add_argument("--head", help="a commit (default: the working tree)")
    ap.add_argument("--arch", default="90", help="build.sh's target (default 90: sm_90a + compute_90)")
    ap.add_argument("--cuobjdump", help="path to cuobjdump")
    ap.add_argument("--keep", help="build in this folder and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    cuobjdump = find_cuobjdump(args.cuobjdump)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sass_compare_"))
    try:
        base_tree = checkout(args.base, work / "base")
        head_tree = checkout(args.head, work / "head") if args.head else ROOT
        base = disassemble(cuobjdump, build(base_tree, args.arch, work / "base-out"))
        head = disassemble(cuobjdump, build(head_tree, args.arch, work / "head-out"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rows, same = compare(base, head)
    width = max((len(r[0]) for r in rows), default=10)
    print(f"{'kernel':<{width}}  {'base':>6}  {'head':>6}  verdict")
    for name, a, b, verdict in rows:
        print(f"{name:<{width}}  {a if a is not None else '-':>6}  {b if b is not None else '-':>6}  {verdict}")
    head_name = args.head or "the working tree"
    print(f"{'all identical' if same else 'not identical'}: {len(rows)} kernels, {args.base} against {head_name}, "
          f"target {args.arch}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
