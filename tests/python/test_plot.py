"""bench/plot.py on the JSON of real `remora bench` runs: the PNG is written, every
curve of the input is drawn with every measured size, and input it cannot read is
refused with the reason. Needs matplotlib (scripts/lib/python.sh installs it into
build/venv) and the remora CLI of the release preset (build/release/tools/remora)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PLOT = ROOT / "bench" / "plot.py"
REMORA = ROOT / "build" / "release" / "tools" / "remora"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def remora_bench(out: Path, *args: str) -> Path:
    if not REMORA.exists():
        pytest.skip(f"the remora CLI is built by the release preset ({REMORA} is missing)")
    proc = subprocess.run([str(REMORA), "bench", *args, "--json", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def plot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PLOT), *args], capture_output=True, text=True, timeout=120)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_draws_a_real_bench_run(tmp_path):
    bw = remora_bench(tmp_path / "bw.json", "p2p", "--mode", "bw", "--sizes", "4K,64K,1M", "--iters", "3",
                      "--warmup", "1")
    lat = remora_bench(tmp_path / "lat.json", "p2p", "--mode", "lat", "--sizes", "8,4K", "--iters", "50",
                       "--warmup", "5")
    out = tmp_path / "p2p.png"
    proc = plot(str(bw), str(lat), "-o", str(out), "--title", "test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert png_size(out) == (1100, 440)  # 11 x 4.4 inches at 100 dpi
    assert out.stat().st_size < 200_000
    lines = proc.stdout.splitlines()
    # One line per curve: every size the runs measured is drawn.
    assert "bandwidth remora p2p bw [bw.json]: 3 points, 4K .. 1M" in lines, proc.stdout
    assert "latency   remora p2p lat (avg) [lat.json]: 2 points, 8 .. 4K" in lines, proc.stdout
    assert lines[-1] == f"wrote {out}"


def test_plot_refuses_what_it_cannot_read(tmp_path):
    out = tmp_path / "never.png"
    not_json = tmp_path / "notes.txt"
    not_json.write_text("not a benchmark\n")
    proc = plot(str(not_json), "-o", str(out))
    assert proc.returncode == 1 and "notes.txt: cannot read it" in proc.stderr, proc.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"tool": "iperf3"}))
    proc = plot(str(other), "-o", str(out))
    assert proc.returncode == 1 and "not a benchmark JSON this script knows (tool: iperf3)" in proc.stderr, proc.stderr
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"tool": "remora bench p2p", "mode": "bw", "results": [{"size": 8}]}))
    proc = plot(str(broken), "-o", str(out))
    assert proc.returncode == 1 and "without the field 'bandwidth_MBps'" in proc.stderr, proc.stderr
    assert not out.exists()
