#!/usr/bin/env python3
"""bench/ab_builds.py — two builds of remora against each other on the same loopback path:
`remora bench p2p` bandwidth and latency of the baseline build and of the candidate, in
back-to-back pairs of alternating order (this host's throughput flips between a slow and
a fast state for seconds to minutes, so only adjacent runs compare), and the median of
the per-pair ratios candidate/baseline. Bandwidth: above 1 is faster; latency (the
average): below 1 is faster. Every run checks its data (bench p2p verifies each size).

  bench/ab_builds.py --baseline OLD/tools/remora --candidate NEW/tools/remora [--pairs 6]
                     [--bw-sizes 64K,1M,16M] [--bw-iters 200] [--lat-sizes 8,4K]
                     [--lat-iters 20000] [--json FILE]

A baseline build of an earlier commit: `git worktree add /tmp/old <commit>`, then
`cmake --preset release && cmake --build build/release --target remora_tool` there.
Exit code 0, or 1 when a run failed (its output is printed). On a terminal a progress
line on stderr says which run is going and about how long is left (bench/lib_progress.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from lib_progress import Progress


def run_p2p(binary, mode, sizes, iters):
    """One `remora bench p2p` run; {size: bandwidth MB/s or average latency us}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p2p.json")
        proc = subprocess.run([binary, "bench", "p2p", "--mode", mode, "--sizes", sizes, "--iters", str(iters),
                               "--json", out], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"ab_builds: {binary} bench p2p --mode {mode} failed (exit {proc.returncode})")
        with open(out) as f:
            results = json.load(f)["results"]
    key = (lambda r: r["bandwidth_MBps"]) if mode == "bw" else (lambda r: r["latency_us"]["avg"])
    return {r["size"]: key(r) for r in results}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--bw-sizes", default="64K,1M,16M")
    ap.add_argument("--bw-iters", type=int, default=200)
    ap.add_argument("--lat-sizes", default="8,4K")
    ap.add_argument("--lat-iters", type=int, default=20000)
    ap.add_argument("--json")
    a = ap.parse_args()
    cases = [("bw", a.bw_sizes, a.bw_iters), ("lat", a.lat_sizes, a.lat_iters)]
    ratios, values = {}, {}
    progress = Progress(a.pairs * len(cases) * 2)
    for pair in range(a.pairs):
        order = [("baseline", a.baseline), ("candidate", a.candidate)]
        if pair % 2 == 1:
            order.reverse()
        for mode, sizes, iters in cases:
            got = {}
            for name, binary in order:
                progress.step(f"pair {pair + 1} of {a.pairs}: {name} bench p2p --mode {mode} --sizes {sizes}")
                got[name] = run_p2p(binary, mode, sizes, iters)
            for size, base in got["baseline"].items():
                cand = got["candidate"][size]
                ratios.setdefault((mode, size), []).append(cand / base)
                values.setdefault((mode, size), []).append((base, cand))
                progress.note(f"pair {pair} {mode:3} {size:>9}: baseline {base:10.2f} candidate {cand:10.2f} "
                              f"ratio {cand / base:.3f}", sys.stdout)
    progress.end()
    unit = {"bw": "MB/s", "lat": "us (avg)"}
    print(f"\n# candidate/baseline, median of {a.pairs} back-to-back pairs (bw: >1 faster; lat: <1 faster)")
    print(f"# {'mode':4} {'size':>9} {'ratio':>7}   per pair")
    for (mode, size), rs in ratios.items():
        print(f"  {mode:4} {size:>9} {statistics.median(rs):7.3f}   "
              + " ".join(f"{r:.3f}" for r in rs) + f"   ({unit[mode]})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"baseline": a.baseline, "candidate": a.candidate, "pairs": a.pairs,
                       "results": [{"mode": m, "size": s, "median_ratio": statistics.median(rs),
                                    "ratios": rs, "values": values[(m, s)]} for (m, s), rs in ratios.items()]},
                      f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
