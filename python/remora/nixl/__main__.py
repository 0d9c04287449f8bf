"""python -m remora.nixl — find or install the remora backend plugin for NVIDIA NIXL.

  python -m remora.nixl path                 the plugin file
  python -m remora.nixl dir                  its folder (a value for NIXL_PLUGIN_DIR: REMORA only)
  python -m remora.nixl nixl-dir             the installed NIXL wheel's own plugin folder
  python -m remora.nixl install [--dir D]    link the plugin into NIXL's folder (or D)
  python -m remora.nixl uninstall [--dir D]  remove that link
"""

from __future__ import annotations

import argparse
import sys

from . import install, nixl_plugin_dir, plugin_dir, plugin_path, uninstall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m remora.nixl", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["path", "dir", "nixl-dir", "install", "uninstall"])
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
        else:
            if not uninstall(a.dir):
                print("nothing to remove", file=sys.stderr)
    except (OSError, ValueError) as e:
        print(f"remora.nixl: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
