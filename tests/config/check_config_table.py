#!/usr/bin/env python3
"""The configuration table, its readers and its docs agree (docs/configuration.md).

Every REMORA_* variable the library reads has one row in the library's table
(`remora config --names`): this fails when a variable is

  - named in a string of the library's or the NCCL plugin's sources (read, checked or
    mentioned in a message) but has no row;
  - a ContextOptions field (include/remora/config.h) without a row that names it, or a
    row naming a field ContextOptions lacks;
  - in the table but not in docs/configuration.md as generated (`remora config
    --check-docs`), or documented differently; and this check itself must fail on a copy
    of the doc with one cell changed;
  - mentioned in README.md or docs/ without being a row, a CMake option or a variable
    of the project's scripts.

    check_config_table.py --remora build/release/tools/remora --root .
"""

import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

TOKEN = re.compile(r"REMORA_[A-Z0-9_]*[A-Z0-9]")
EXEMPT = re.compile(r"^REMORA_(TEST|BENCH)(_|$)")


def tokens_in_strings(path):
    text = path.read_text(errors="replace")
    found = set()
    for literal in re.findall(r'"(?:[^"\\\n]|\\.)*"', text):
        found.update(TOKEN.findall(literal))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remora", required=True)
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    problems = []

    names = set(subprocess.run([args.remora, "config", "--names"], check=True, capture_output=True,
                               text=True).stdout.split())
    markdown = subprocess.run([args.remora, "config", "--markdown"], check=True, capture_output=True,
                              text=True).stdout
    cmake_options = set()
    for f in [root / "CMakeLists.txt", *root.glob("cmake/*.cmake"), *root.glob("**/CMakeLists.txt")]:
        if "build" in f.parts:
            continue
        cmake_options.update(re.findall(r"(?:option|set)\((REMORA_[A-Z0-9_]+)", f.read_text()))
    macros = set()
    for f in [*root.glob("include/**/*.h"), *root.glob("src/**/*.h")]:
        macros.update(re.findall(r"#define\s+(REMORA_[A-Z0-9_]+)", f.read_text()))
    script_vars = set()
    for f in [*root.glob("scripts/*.sh"), *root.glob("scripts/lib/*.sh"), root / ".ci/run", *root.glob("bench/*.sh"),
              *root.glob("bench/**/*.py")]:
        if f.is_file():
            script_vars.update(TOKEN.findall(f.read_text(errors="replace")))

    # 1. What the library's and the plugin's sources name has a row.
    for f in sorted([*root.glob("src/**/*.cc"), *root.glob("src/**/*.h"), *root.glob("plugin/**/*.cc"),
                     *root.glob("plugin/**/*.h")]):
        for t in sorted(tokens_in_strings(f)):
            if t not in names and t not in cmake_options and not EXEMPT.match(t):
                problems.append(f"{f.relative_to(root)} names {t}, which has no row in the configuration table")

    # 2. ContextOptions's fields and the rows' fields are the same set.
    header = (root / "include/remora/config.h").read_text()
    body = header[header.index("struct ContextOptions {"):]
    body = body[:body.index("\n};")]
    # One level of nested template arguments: std::optional<std::array<char, 256>>.
    options = set(re.findall(r"std::optional<(?:[^<>]|<[^<>]*>)+>\s+(\w+)\s*=", body))
    fields = set(re.findall(r"`ContextOptions::(\w+)`", markdown))
    for f in sorted(options - fields):
        problems.append(f"ContextOptions::{f} has no row in the configuration table")
    for f in sorted(fields - options):
        problems.append(f"a row names ContextOptions::{f}, which ContextOptions lacks")

    # 3. The doc holds the generated tables, and the check would see a change.
    doc = root / "docs/configuration.md"
    r = subprocess.run([args.remora, "config", "--check-docs", str(doc)], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("docs/configuration.md differs from the table:\n" + r.stdout + r.stderr)
    text = doc.read_text()
    changed = text.replace("| `REMORA_STREAMS` | `2` |", "| `REMORA_STREAMS` | `3` |", 1)
    if changed == text:
        problems.append("docs/configuration.md has no REMORA_STREAMS row to change (the self-check needs one)")
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".md") as t:
            t.write(changed)
            t.flush()
            if subprocess.run([args.remora, "config", "--check-docs", t.name], capture_output=True).returncode == 0:
                problems.append("remora config --check-docs passed a doc whose REMORA_STREAMS default was changed")

    # 4. What the docs mention exists (a prefix such as REMORA_COLL_* names a family of rows).
    def prefix_of_rows(t):
        return any(n.startswith(t + "_") for n in names)

    for f in sorted([root / "README.md", *root.glob("docs/*.md")]):
        for t in sorted(set(TOKEN.findall(f.read_text()))):
            if (t not in names and t not in cmake_options and t not in script_vars and t not in macros
                    and not EXEMPT.match(t) and not prefix_of_rows(t)):
                problems.append(f"{f.relative_to(root)} mentions {t}: no row, CMake option or script variable")

    for p in problems:
        print(p)
    print(f"{len(names)} variables, {len(options)} ContextOptions fields: "
          f"{'OK' if not problems else str(len(problems)) + ' problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
