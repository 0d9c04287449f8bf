#!/usr/bin/env python3
"""bench/scale.py — how a communicator grows: init time, sockets and memory per rank.

Runs `remora run -n N remora_coll_scale [--alltoall]` for each N and prints, per N, the
job's wall time, init time across ranks (median and max), the sockets each rank holds
after init, after the small collectives (allreduce, broadcast, reduce_scatter,
allgather, barrier) and after an alltoall (median and max), and resident memory (median,
MiB). Every rank checks every result; a failed or wrong rank fails the run.

  bench/scale.py --build build/release [--ranks 8,16,32,64,128] [--streams 2] [--json FILE]

On a terminal a progress line says which job runs. docs/scaling.md has the figures and
the model fitted to them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from lib_progress import Progress


def run_job(build, n, streams, alltoall, timeout):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_STREAMS"] = str(streams)
    cmd = [os.path.join(build, "tools", "remora"), "run", "-n", str(n), "--timeout", str(timeout), "--",
           os.path.join(build, "tests", "integration", "remora_coll_scale")]
    if alltoall:
        cmd.append("--alltoall")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 60)
    wall = time.monotonic() - t0
    ranks = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            ranks.append(json.loads(line))
    bad = [r for r in ranks if "failed" in r or "wrong" in r]
    if proc.returncode != 0 or bad or len(ranks) != n:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"scale: the job of {n} ranks failed (exit {proc.returncode}, {len(ranks)} reports)")
    return wall, ranks


def summary(n, wall, ranks, points):
    row = {"ranks": n, "wall_s": round(wall, 2),
           "init_ms_median": round(statistics.median(r["init_ms"] for r in ranks), 1),
           "init_ms_max": round(max(r["init_ms"] for r in ranks), 1)}
    for p in points:
        socks = [r[p]["sockets"] for r in ranks]
        row[f"sockets_{p}_median"] = statistics.median(socks)
        row[f"sockets_{p}_max"] = max(socks)
    row["rss_mib_median"] = round(statistics.median(r[points[-1]]["rss_kib"] for r in ranks) / 1024, 1)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--ranks", default="8,16,32,64,128")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--no-alltoall", action="store_true")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    points = ["init", "collectives"] + ([] if args.no_alltoall else ["alltoall"])
    rows = []
    progress = Progress(len(sizes))
    for i, n in enumerate(sizes):
        progress.step(f"{n} ranks")
        wall, ranks = run_job(args.build, n, args.streams, not args.no_alltoall, args.timeout)
        rows.append(summary(n, wall, ranks, points))
    progress.end()
    cols = list(rows[0].keys())
    print("# " + "  ".join(cols))
    for r in rows:
        print("  " + "  ".join(str(r[c]) for c in cols))
    print(f"# REMORA_STREAMS={args.streams}; sockets: counted in /proc/self/fd by each rank, after a barrier")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"streams": args.streams, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
