"""native/cs1.h must compile as strict C11 and as C++, and its declarations must match the built library (a C
program linked against it compares the version macro with cs1_abi_version())."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from startlux_native import abi


def have_compiler(name: str) -> bool:
    return shutil.which(name) is not None


NATIVE = Path(__file__).resolve().parents[2] / "native"


def c_source() -> str:
    # take the address of every declared function through the header's own prototypes
    refs = ",\n    ".join(f"(void (*)(void)){name}" for name in abi.declared_functions())
    return f"""#include <stdio.h>
#include "cs1.h"

typedef void (*fn_t)(void);
static fn_t const all_functions[] = {{
    {refs}
}};

int main(void) {{
    unsigned n = (unsigned)(sizeof all_functions / sizeof all_functions[0]);
    for (unsigned i = 0; i < n; ++i)
        if (!all_functions[i]) return 3;
    if (cs1_abi_version() != CS1_ABI_VERSION) return 2;
    if (CS1_ERR_GRAPH != 2007 || CS1_OK != 0) return 4;
    printf("%u functions, abi %u, %s\\n", n, cs1_abi_version(), cs1_build_info());
    return 0;
}}
"""


@pytest.mark.parametrize("compiler,flags", [
    ("gcc", ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-x", "c"]),
    ("g++", ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-x", "c++"]),
])
def test_header_compiles_strictly(tmp_path, compiler, flags):
    if not have_compiler(compiler):
        pytest.skip(f"{compiler} not found")
    src = tmp_path / "use_header.c"
    src.write_text(c_source())
    proc = subprocess.run([compiler, *flags, f"-I{NATIVE}", "-c", str(src), "-o", str(tmp_path / "x.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not found")
def test_header_links_and_agrees_with_library(tmp_path, built_library):
    src = tmp_path / "use_header.c"
    src.write_text(c_source())
    exe = tmp_path / "use_header"
    lib_dir = built_library.parent
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", f"-I{NATIVE}", str(src), "-o", str(exe),
                    f"-L{lib_dir}", f"-l:{built_library.name}", f"-Wl,-rpath,{lib_dir}"], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
