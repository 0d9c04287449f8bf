"""remora.nixl: where the remora backend plugin for NVIDIA NIXL is, and how NIXL finds it.

`pip install` of remora ships ``libplugin_REMORA.so`` in this folder. NIXL loads a backend
named ``REMORA`` (``nixl_agent_config(backends=["REMORA"])``) from ``libplugin_REMORA.so`` in
its plugin folder: ``NIXL_PLUGIN_DIR`` when set (it *replaces* NIXL's own folder, so the
backends NIXL bundles, UCX among them, are then not found), else the ``plugins`` folder
next to NIXL's ``libnixl.so``. So either

* ``python -m remora.nixl install`` links the plugin into NIXL's own folder: every backend
  stays reachable, nothing to set; or
* ``export NIXL_PLUGIN_DIR=$(python -m remora.nixl dir)``: only REMORA is found; or
* ``python -m remora.nixl make-dir DIR`` makes a folder of links to NIXL's plugins and
  this one, for ``NIXL_PLUGIN_DIR=DIR`` when NIXL's own folder cannot be written to: it
  prints the ``LD_LIBRARY_PATH`` NIXL's UCX plugin then needs (it finds its UCX libraries
  relative to its own folder, which a link elsewhere does not have).

See docs/nixl.md for the releases of NIXL the plugin supports and how to configure
vLLM, SGLang, Dynamo, LMCache and TensorRT-LLM.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

PLUGIN_NAME = "libplugin_REMORA.so"
# NIXL wheels, newest CUDA first: their libraries live in site-packages/.<dist>.mesonpy.libs.
_NIXL_DISTRIBUTIONS = ("nixl_cu13", "nixl_cu12")

__all__ = ["PLUGIN_NAME", "plugin_path", "plugin_dir", "nixl_plugin_dir", "install", "uninstall", "make_plugin_dir"]


def plugin_dir() -> str:
    """The folder holding ``libplugin_REMORA.so`` and no other NIXL plugin: a value for
    ``NIXL_PLUGIN_DIR`` when only the REMORA backend is wanted."""
    return str(Path(__file__).resolve().parent)


def plugin_path() -> str:
    """The path of ``libplugin_REMORA.so``. ``FileNotFoundError`` when this installation of
    remora was built without it (``-DREMORA_BUILD_NIXL_PLUGIN=OFF``)."""
    p = Path(plugin_dir()) / PLUGIN_NAME
    if not p.is_file():
        raise FileNotFoundError(f"{p}: this remora was built without the NIXL plugin")
    return str(p)


def nixl_plugin_dir() -> Optional[str]:
    """The plugin folder of the NIXL wheel installed with this Python (``nixl-cu12`` or
    ``nixl-cu13``): where NIXL looks when ``NIXL_PLUGIN_DIR`` is not set. ``None`` when no
    NIXL wheel is installed."""
    for dist in _NIXL_DISTRIBUTIONS:
        try:
            spec = importlib.util.find_spec(dist)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin is None:
            continue
        folder = Path(spec.origin).resolve().parent.parent / f".{dist}.mesonpy.libs" / "plugins"
        if folder.is_dir():
            return str(folder)
    return None


def _target(folder: Optional[str]) -> Path:
    if folder is None:
        folder = nixl_plugin_dir()
        if folder is None:
            raise FileNotFoundError("no NIXL wheel (nixl-cu12, nixl-cu13) is installed with this Python; "
                                    "name NIXL's plugin folder explicitly")
    return Path(folder) / PLUGIN_NAME


def install(folder: Optional[str] = None) -> str:
    """Links ``libplugin_REMORA.so`` into NIXL's plugin folder (``folder``, default
    :func:`nixl_plugin_dir`), replacing an earlier link; returns the link's path. NIXL's
    own plugins stay where they are, so UCX and the others keep working beside REMORA.
    ``FileExistsError`` when a file that is not a link of ours is already there."""
    source = plugin_path()
    link = _target(folder)
    if link.is_symlink() or link.exists():
        if not link.is_symlink() or Path(os.readlink(link)).name != PLUGIN_NAME:
            raise FileExistsError(f"{link} exists and is not a link to remora's plugin; remove it first")
        link.unlink()
    link.symlink_to(source)
    return str(link)


def uninstall(folder: Optional[str] = None) -> bool:
    """Removes the link :func:`install` made; False when there was none."""
    link = _target(folder)
    if link.is_symlink():
        link.unlink()
        return True
    return False


def make_plugin_dir(folder: str) -> str:
    """Makes ``folder`` (a value for ``NIXL_PLUGIN_DIR``) hold links to every plugin of the
    installed NIXL wheel and to ``libplugin_REMORA.so``, and returns the folder of the
    wheel's bundled libraries, which ``LD_LIBRARY_PATH`` must name for NIXL's UCX plugin to
    load from there. ``FileNotFoundError`` without a NIXL wheel."""
    nixl = nixl_plugin_dir()
    if nixl is None:
        raise FileNotFoundError("no NIXL wheel (nixl-cu12, nixl-cu13) is installed with this Python")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for lib in sorted(Path(nixl).glob("lib*.so")):
        if lib.name != PLUGIN_NAME:
            link = out / lib.name
            if link.is_symlink():
                link.unlink()
            link.symlink_to(lib.resolve())
    link = out / PLUGIN_NAME
    if link.is_symlink():
        link.unlink()
    link.symlink_to(plugin_path())
    # site-packages/.nixl_cuXX.mesonpy.libs/plugins -> site-packages/nixl_cuXX.libs
    libs_dir = Path(nixl).parent
    return str(libs_dir.parent / (libs_dir.name[1:].split(".")[0] + ".libs"))
