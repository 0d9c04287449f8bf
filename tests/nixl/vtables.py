"""tests/nixl/vtables.py — the slots of a C++ vtable in a shared object, named: read with
binutils (nm for symbols and sizes, readelf for the relocations that fill the vtable,
c++filt to demangle), so that the REMORA plugin's engine can be compared, slot by slot,
with the engines of the plugins NIXL's wheel ships (test_plugin.py)."""

from __future__ import annotations

import re
import shutil
import subprocess


def tools_missing() -> list[str]:
    return [t for t in ("nm", "readelf", "c++filt") if shutil.which(t) is None]


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _demangle(names: list[str]) -> list[str]:
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def vtable_symbols(library: str, pattern: str) -> list[str]:
    """Names of the vtables (_ZTV...) in `library` whose mangled name matches `pattern`."""
    return [line.split()[-1] for line in _run("nm", library).splitlines()
            if line.split() and re.fullmatch(pattern, line.split()[-1]) and line.split()[-1].startswith("_ZTV")]


def slots(library: str, vtable: str) -> list[set[str]]:
    """The virtual function slots of `vtable` (after offset-to-top and typeinfo): for each,
    every demangled name found at the address it holds (identical functions may be folded
    into one), or {"__cxa_pure_virtual"}."""
    start = size = None
    by_addr: dict[int, list[str]] = {}
    for line in _run("nm", "-S", library).splitlines():
        w = line.split()
        if len(w) == 4 and w[3] == vtable:
            start, size = int(w[0], 16), int(w[1], 16)
        if len(w) >= 3 and w[-2] in "tTwWiI":
            by_addr.setdefault(int(w[0], 16), []).append(w[-1])
    if start is None:
        raise LookupError(f"{vtable} not in {library} (stripped?)")
    filled: dict[int, list[str]] = {}
    for line in _run("readelf", "-rW", library).splitlines():
        w = line.split()
        if len(w) < 3 or not re.fullmatch(r"[0-9a-f]{8,16}", w[0]):
            continue
        off = int(w[0], 16)
        if not start <= off < start + size:
            continue
        if w[2].endswith("_RELATIVE"):
            filled[off] = by_addr.get(int(w[-1], 16), [f"<{w[-1]}>"])
        elif len(w) >= 5:
            filled[off] = [w[4].split("@")[0]]
    out = []
    for off in range(start + 16, start + size, 8):
        out.append(set(_demangle(filled.get(off, ["<null>"]))))
    return out


def method(demangled: str) -> str:
    """"ns::Class::name(args) const" -> "name(args) const"; destructors -> "~"."""
    demangled = demangled.replace("(anonymous namespace)", "{anonymous}")
    paren = demangled.find("(")
    if paren < 0:
        return demangled
    head, tail = demangled[:paren], demangled[paren:]
    name = head.rsplit("::", 1)[-1]
    return "~" if name.startswith("~") else name + tail
