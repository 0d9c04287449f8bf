"""The plugin as a file NIXL loads, against the installed nixl-cu12 wheel: its engine's
vtable slot by slot against the UCX plugin's (the wheel ships no headers: this is what
proves our declarations, with every transfer test), the refusal of a NIXL release it was
not verified against, how remora.nixl finds and installs it, and the two ways to keep
NIXL's UCX backend reachable beside it (NIXL_PLUGIN_DIR replaces NIXL's own folder)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

import remora
import remora.nixl
import vtables
from conftest import AgentError, b64
from test_transfers import GUARD, MIB, assert_intact, run, setup_buffers


def ucx_plugin() -> str:
    folder = remora.nixl.nixl_plugin_dir()
    assert folder is not None, "the nixl-cu12 wheel is installed"
    return str(Path(folder) / "libplugin_UCX.so")


def test_the_engine_vtable_is_the_wheels(tmp_path):
    """Every slot of our engine's vtable holds a function of the same name and signature as
    the same slot of the UCX plugin's engine in the installed wheel, and the base class's
    own vtable (pure virtual slots and defaults) is the same in both."""
    if vtables.tools_missing():
        pytest.skip(f"binutils missing: {vtables.tools_missing()}")
    ours = os.environ.get("NIXL_ABI_TEST_PLUGIN", remora.nixl.plugin_path())
    if not vtables.vtable_symbols(ours, r".*RemoraBackendE"):
        pytest.skip(f"{ours} is stripped: name an unstripped build of it in NIXL_ABI_TEST_PLUGIN "
                    "(scripts/lib/nixl.sh passes build/release's)")
    mine = vtables.slots(ours, vtables.vtable_symbols(ours, r".*RemoraBackendE")[0])
    ucx = vtables.slots(ucx_plugin(), "_ZTV13nixlUcxEngine")
    assert len(mine) == 27, "27 slots: the nixlBackendEngine of NIXL 1.4.1 to 1.5.1"
    for i, names in enumerate(mine):
        want = {vtables.method(n) for n in ucx[i]}
        have = {vtables.method(n) for n in names}
        assert want & have, f"slot {i}: ours {sorted(names)}, the wheel's {sorted(ucx[i])}"
    base_mine = vtables.slots(ours, "_ZTV17nixlBackendEngine")
    base_ucx = vtables.slots(ucx_plugin(), "_ZTV17nixlBackendEngine")
    assert [{vtables.method(n) for n in s} for s in base_mine] == [{vtables.method(n) for n in s} for s in base_ucx]


def fake_wheel(tmp: Path, version: str) -> str:
    site = tmp / "site"
    (site / ".nixl_cu12.mesonpy.libs").mkdir(parents=True)
    (site / ".nixl_cu12.mesonpy.libs" / "libnixl.so").write_bytes(b"ELF")
    (site / f"nixl_cu12-{version}.dist-info").mkdir()
    (site / f"nixl_cu12-{version}.dist-info" / "METADATA").write_text(f"Name: nixl-cu12\nVersion: {version}\n")
    return str(site / ".nixl_cu12.mesonpy.libs" / "libnixl.so")


def test_another_nixl_release_is_refused_with_the_reason(loopback, tmp_path):
    # The agent is the real 1.5.1; the plugin is told it runs in 1.4.0 (release.h's
    # REMORA_NIXL_LIBRARY): it must not start, and say why.
    with pytest.raises(AgentError) as e:
        loopback.agent("A", env={"REMORA_NIXL_LIBRARY": fake_wheel(tmp_path, "1.4.0")})
    assert e.value.error.startswith("nixl"), e.value
    log = next(tmp_path.glob("nixl-agent-A-*.log")).read_text()
    assert "NIXL 1.4.0" in log and "is not a release this plugin was built and tested for" in log, log


def test_the_running_release_is_named_in_the_log(loopback):
    a = loopback.agent("A", env={"REMORA_LOG": "info"})
    version = importlib.metadata.version("nixl-cu12")
    assert f"NIXL {version} (" in a.log() and "from the wheel's dist-info" in a.log(), a.log()


def test_remora_nixl_finds_the_plugin():
    path = remora.nixl_plugin_path()
    assert Path(path).is_file() and Path(path).name == "libplugin_REMORA.so"
    assert Path(remora.nixl.plugin_dir()) == Path(path).parent
    assert [p.name for p in Path(remora.nixl.plugin_dir()).glob("libplugin_*.so")] == ["libplugin_REMORA.so"]
    cli = lambda *a: subprocess.run([sys.executable, "-m", "remora.nixl", *a], capture_output=True, text=True)
    assert cli("path").stdout.strip() == path
    assert cli("dir").stdout.strip() == remora.nixl.plugin_dir()
    assert Path(cli("nixl-dir").stdout.strip()) == Path(ucx_plugin()).parent
    assert cli("bogus").returncode != 0


def ucx_and_remora(world, env: dict):
    """Two agents with both UCX and REMORA; a WRITE through each, every byte checked."""
    both = {"UCX_TLS": "tcp", **env}
    a = world.agent("A", 0, both, backends="UCX,REMORA")
    b = world.agent("B", 1, both, backends="UCX,REMORA")
    addr = setup_buffers(a, b, MIB)
    for i, backend in enumerate(("REMORA", "UCX")):
        off = GUARD + i * (MIB // 2)
        a.call("prep", h=backend, op="WRITE", local=[["src", off, MIB // 2]], remote=[[addr["dst"] + off, MIB // 2]],
               agent="B", notif=b64(backend.encode()), backends=[backend])
        assert run(a, backend) == "DONE", backend
        assert b.call("notifs", count=1)["notifs"] == {"A": [b64(backend.encode())]}, backend
    assert_intact(b, "dst", [[GUARD, MIB, 1, GUARD]])


def test_install_links_the_plugin_into_nixls_folder_and_ucx_stays(loopback, tmp_path):
    link = Path(remora.nixl.install())
    try:
        assert link.is_symlink() and link.resolve() == Path(remora.nixl_plugin_path()).resolve()
        assert link.parent == Path(ucx_plugin()).parent
        ucx_and_remora(loopback, {"NIXL_PLUGIN_DIR": None})  # NIXL's own folder
        assert Path(remora.nixl.install()) == link  # again: replaced, not refused
    finally:
        assert remora.nixl.uninstall()
    assert not link.exists() and not remora.nixl.uninstall()


def test_a_folder_of_links_with_the_wheels_libraries_keeps_ucx(loopback, tmp_path):
    """NIXL_PLUGIN_DIR pointing at links to the wheel's plugins and ours: UCX's plugin finds
    its UCX libraries relative to its own folder ($ORIGIN), so without LD_LIBRARY_PATH naming
    the wheel's nixl_cu12.libs it fails to load; with it, both backends work."""
    folder = tmp_path / "plugins"
    libs = remora.nixl.make_plugin_dir(str(folder))
    assert (folder / "libplugin_REMORA.so").is_symlink() and (folder / "libplugin_UCX.so").is_symlink()
    with pytest.raises(AgentError):
        loopback.agent("X", env={"NIXL_PLUGIN_DIR": str(folder), "UCX_TLS": "tcp"}, backends="UCX")
    ucx_and_remora(loopback, {"NIXL_PLUGIN_DIR": str(folder), "LD_LIBRARY_PATH": libs})
