"""cffi binding (ABI mode) of libqwen3_5_cuda.so. The cdef is the CDEF region of native/cs1.h itself."""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import cffi

HEADER = Path(__file__).resolve().parent.parent / "native" / "cs1.h"
DEFAULT_LIBRARY = Path(__file__).resolve().parent.parent / "target" / "libqwen3_5_cuda.so"
LIBRARY_ENV = "CS1_LIBRARY"


class Cs1Error(RuntimeError):
    """A cs1_* call returned a non-zero status."""

    def __init__(self, function: str, status: int, text: str):
        super().__init__(f"{function} failed: {text} (status {status})")
        self.function = function
        self.status = status
        self.text = text

    @property
    def sticky(self) -> bool:
        """CUDA errors that leave the context unusable (illegal/misaligned address, launch failure, ...)."""
        # illegal/misaligned address, launch timeout/failure, hardware and ECC/NVLink errors, unknown:
        # the context is corrupt (CUDA runtime docs); out-of-resources, peer and capture errors are not
        return self.status in (214, 220, 226, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 999)


@cache
def header_text() -> str:
    return HEADER.read_text(encoding="utf-8")


@cache
def header_abi_version() -> int:
    m = re.search(r"#define\s+CS1_ABI_VERSION\s+(\d+)", header_text())
    if not m:
        raise RuntimeError(f"{HEADER} has no CS1_ABI_VERSION")
    return int(m.group(1))


def cdef_source() -> str:
    text = header_text()
    m = re.search(r"/\* CS1_CDEF_BEGIN \*/(.*)/\* CS1_CDEF_END \*/", text, re.S)
    if not m:
        raise RuntimeError(f"{HEADER} has no CS1_CDEF_BEGIN/END region")
    return re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)


def declared_functions() -> list[str]:
    return re.findall(r"\b(cs1_\w+)\s*\(", cdef_source())


class Library:
    """The loaded .so. Attribute access gives a checked wrapper: int-returning cs1_* functions raise Cs1Error
    on a non-zero status; other functions (version, strings) return their value as is."""

    def __init__(self, path: str | os.PathLike, *, strict: bool = True):
        """strict=False (A/B tools comparing builds across ABI versions only): a missing function or another ABI
        version is allowed; calling a function the library lacks then raises AttributeError."""
        self.path = str(path)
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_source())
        try:
            self.raw = self.ffi.dlopen(self.path)
        except OSError as exc:
            raise RuntimeError(f"cannot load {self.path}: {exc}. Build it with ./build.sh target 90") from exc
        missing = []
        for name in declared_functions():
            try:
                getattr(self.raw, name)
            except AttributeError:
                missing.append(name)
        if missing and strict:
            raise RuntimeError(f"{self.path} lacks {', '.join(missing)}; rebuild it with ./build.sh")
        have, need = int(self.raw.cs1_abi_version()), header_abi_version()
        if have != need and strict:
            raise RuntimeError(f"{self.path} has ABI version {have}, this package needs {need}; "
                               "rebuild it with ./build.sh")
        self._int_functions = set(re.findall(r"\bint\s+(cs1_\w+)\s*\(", cdef_source()))

    def error_string(self, status: int) -> str:
        return self.ffi.string(self.raw.cs1_error_string(status)).decode("utf-8", "replace")

    def build_info(self) -> str:
        return self.ffi.string(self.raw.cs1_build_info()).decode("utf-8", "replace")

    def __getattr__(self, name: str):
        if not name.startswith("cs1_"):
            raise AttributeError(name)
        fn = getattr(self.raw, name)
        if name not in self._int_functions:
            return fn

        def checked(*args, _fn=fn, _name=name):
            status = _fn(*args)
            if status != 0:
                raise Cs1Error(_name, status, self.error_string(status))
            return status

        self.__dict__[name] = checked
        return checked


def library_path(explicit: str | os.PathLike | None = None) -> Path:
    """The explicit path, else $CS1_LIBRARY, else target/libqwen3_5_cuda.so in the checkout."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(LIBRARY_ENV)
    return Path(env) if env else DEFAULT_LIBRARY


@cache
def load(path: str | None = None) -> Library:
    return Library(library_path(path))
