"""Every cs1_* call written in the benchmarks, the scripts and the GPU tests passes as many arguments as native/cs1.h
declares.

Those run only on the GPU machine, where a wrong argument count costs a device call (cffi rejects it only at the
call), so this reads the calls statically (ast) against the header's declarations (abi.cdef_source()) on every CI
run. Calls with *args or keywords are not counted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from startlux_native import abi

ROOT = Path(__file__).resolve().parents[2]


def declared_arity() -> dict[str, int]:
    out = {}
    for name, params in re.findall(r"\b(cs1_\w+)\s*\(([^;{]*?)\)\s*;", abi.cdef_source(), re.S):
        params = params.strip()
        out[name] = 0 if params in ("", "void") else params.count(",") + 1
    return out


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("cs1_")
                and not any(isinstance(a, ast.Starred) for a in node.args) and not node.keywords):
            yield node.func.attr, len(node.args), node.lineno


def test_gpu_side_calls_match_the_header():
    arity = declared_arity()
    assert set(arity) == set(abi.declared_functions()), "the arity parse missed a declaration of cs1.h"
    checked, wrong = 0, []
    for path in [p for d in ("benchmarks", "scripts", "tests/gpu") for p in sorted((ROOT / d).rglob("*.py"))]:
        for name, n, line in calls(path):
            if name not in arity:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} is not in cs1.h")
            elif n != arity[name]:
                where = f"{path.relative_to(ROOT)}:{line}"
                wrong.append(f"{where}: {name} with {n} arguments, cs1.h declares {arity[name]}")
            checked += 1
    print(f"{checked} cs1_* calls checked")
    assert checked > 20
    assert not wrong, "\n".join(wrong)
