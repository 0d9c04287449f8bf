"""python -m remora.nixl — find or install the remora backend plugin for NVIDIA NIXL.

  python -m remora.nixl path                 the plugin file
  python -m remora.nixl dir                  its folder (a value for NIXL_PLUGIN_DIR: REMORA only)
  python -m remora.nixl nixl-dir             the installed NIXL wheel's own plugin folder
  python -m remora.nixl install [--dir D]    link the plugin into NIXL's folder (or D)
  python -m remora.nixl uninstall [--dir D]  remove that link
  python -m remora.nixl make-dir DIR         a folder of links to NIXL's plugins and this one,
                                             for NIXL_PLUGIN_DIR=DIR; prints the LD_LIBRARY_PATH
                                             NIXL's UCX plugin then needs
"""

from __future__ import annotations

import argparse
import sys

from . import install, make_plugin_dir, nixl_plugin_dir, plugin_dir, plugin_path, uninstall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m remora.nixl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["path", "dir", "nixl-dir", "install", "uninstall", "make-dir"])
    p.add_argument("folder", nargs="?", help="make-dir: the folder to make")
    p.add_argument("--dir", default=None, help="NIXL's plugin folder (default: the installed wheel's)")
    a = p.parse_args(argv)
    try:
        if a.command == "path":
            print(plugin_path())
        elif a.command == "dir":
            print(plugin_dir())
        elif a.command == "nixl-dir":
            d = nixl_plugin_dir()
            if d is None:
                print("no NIXL wheel (nixl-cu12, nixl-cu13) is installed with this Python", file=sys.stderr)
                return 1
            print(d)
        elif a.command == "install":
            print(install(a.dir))
        elif a.command == "make-dir":
            if not a.folder:
                print("make-dir needs a folder", file=sys.stderr)
                return 2
            libs = make_plugin_dir(a.folder)
            print(f"export NIXL_PLUGIN_DIR={a.folder}")
            print(f"export LD_LIBRARY_PATH={libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
        else:
            if not uninstall(a.dir):
                print("nothing to remove", file=sys.stderr)
    except (OSError, ValueError) as e:
        print(f"remora.nixl: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
