#!/usr/bin/env python3
"""bench/compare_mpi.py — remora against Open MPI's TCP transport on loopback, two
processes of this host, every byte on TCP for both (`REMORA_SAME_HOST=off`; Open MPI
with `--mca pml ob1 --mca btl tcp,self`, so its shared-memory transport is off too).

Three measurements, each as the OSU micro-benchmarks make it (bench/mpi/mpi_reference.c
is the Open MPI side, compiled here with mpicc):

  bw SIZE         osu_bw, window --window:  `remora bench p2p --mode bw`
  put SIZE        osu_put_bw (lock/unlock around a window of MPI_Put, osc pt2pt):
                  `remora bench rma --mode put_bw`
  allreduce SIZE  MPI_Allreduce of float32, sum, 2 ranks: `remora bench coll --op
                  allreduce -n 2` (out of place), algorithm bandwidth
  allreduce_inplace SIZE  the same in place (MPI_IN_PLACE; PyTorch's allreduce works
                  in place): the in-place column of the same `bench coll` table

in back-to-back pairs of alternating order (this host's speed flips between states, so
only adjacent runs compare): Open MPI first in odd pairs, remora first in even ones.
The ratio is remora over Open MPI (above 1: remora moves more bytes per second), the
median of the per-pair ratios. For bw it also gives the CPU both processes spent per
GB moved (user + system, both ranks). Every run checks the bytes that arrived.

Needs Debian's openmpi-bin and libopenmpi-dev (mpicc); says so and exits 2 without them.
Exit 0 when every run passed its check; 4 when one failed.

  bench/compare_mpi.py --pairs 4 --json bench/results/mpi-tcp.json
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from lib_compare import size_bytes  # noqa: E402
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--bind-to", "none",
          "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "osc", "pt2pt",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]


def iterations(mode, size, window):
    """Enough windows (operations for allreduce) for about 2 GiB (1 GiB) per run."""
    if mode.startswith("allreduce"):
        return max(5, (1 << 30) // size)
    return max(3, (2 << 30) // (size * window))


def build_reference(out_dir):
    needs = "compare_mpi: needs Open MPI's mpicc, mpirun and mpi.h (apt-get install openmpi-bin libopenmpi-dev)"
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        print(needs, file=sys.stderr)
        sys.exit(2)
    exe = os.path.join(out_dir, "mpi_reference")
    # openmpi-bin alone installs the mpicc wrapper without the headers it compiles against.
    p = subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(HERE, "mpi", "mpi_reference.c")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{needs}\nmpicc exited {p.returncode}:\n{p.stderr[-2000:]}", file=sys.stderr)
        sys.exit(2)
    return exe


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.stderr.write(f"compare_mpi: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        return None
    return p.stdout


def run_mpi(exe, mode, size, window, iters):
    args = [exe, mode, str(size)] + ([str(iters)] if mode.startswith("allreduce") else [str(window), str(iters)])
    out = run(MPIRUN + args, env=dict(os.environ, OMPI_MCA_hwloc_base_binding_policy="none"))
    if out is None:
        return None
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["RESULT"]:
            return {"MBps": float(f[3]), "seconds": float(f[4]), "cpu_seconds": float(f[5])}
    return None


def run_remora(remora, mode, size, window, iters, tmp):
    env = dict(os.environ, REMORA_SAME_HOST="off")
    out_json = os.path.join(tmp, "remora.json")
    if mode == "bw":
        cmd = [remora, "bench", "p2p", "--mode", "bw", "--window", str(window)]
    elif mode == "put":
        cmd = [remora, "bench", "rma", "--mode", "put_bw", "--window", str(window)]
    else:
        cmd = [remora, "bench", "coll", "--op", "allreduce", "-n", "2", "--no-reference", "-d", "float32"]
    cmd += ["--sizes", str(size), "--iters", str(iters), "--json", out_json]
    if run(cmd, env=env) is None:
        return None
    with open(out_json) as f:
        r = json.load(f)["results"][0]
    if mode.startswith("allreduce"):
        column = r["in_place" if mode == "allreduce_inplace" else "out_of_place"]
        if column["wrong"] != 0:
            return None
        return {"MBps": column["algbw_GBps"] * 1000.0}
    if not r.get("verified", False):
        return None
    res = {"MBps": r["bandwidth_MBps"], "seconds": r["seconds"]}
    if "cpu_seconds" in r:
        res["cpu_seconds"] = r["cpu_seconds"]["driver"] + r["cpu_seconds"]["follower"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remora", default=os.path.join(ROOT, "build", "release", "tools", "remora"))
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--bw-sizes", default="1M,16M")
    ap.add_argument("--put-sizes", default="16M")
    ap.add_argument("--allreduce-sizes", default="16M")
    ap.add_argument("--allreduce-inplace-sizes", default="16M")
    ap.add_argument("--json")
    a = ap.parse_args()

    metrics = ([("bw", s) for s in a.bw_sizes.split(",") if s] + [("put", s) for s in a.put_sizes.split(",") if s] +
               [("allreduce", s) for s in a.allreduce_sizes.split(",") if s] +
               [("allreduce_inplace", s) for s in a.allreduce_inplace_sizes.split(",") if s])
    tmp = tempfile.mkdtemp(prefix="compare_mpi.")
    exe = build_reference(tmp)
    rows = {m: [] for m in metrics}
    failed = False
    for pair in range(1, a.pairs + 1):
        mpi_first = pair % 2 == 1
        for mode, label in metrics:
            size = size_bytes(label)
            iters = iterations(mode, size, a.window)
            order = ["mpi", "remora"] if mpi_first else ["remora", "mpi"]
            got = {}
            for who in order:
                got[who] = (run_mpi(exe, mode, size, a.window, iters) if who == "mpi" else
                            run_remora(a.remora, mode, size, a.window, iters, tmp))
            if got["mpi"] is None or got["remora"] is None:
                failed = True
                print(f"pair {pair} {mode} {label}: a run failed (see above)", flush=True)
                continue
            ratio = got["remora"]["MBps"] / got["mpi"]["MBps"]
            rows[(mode, label)].append({"pair": pair, "mpi_first": mpi_first, "mpi": got["mpi"],
                                        "remora": got["remora"], "ratio": ratio})
            print(f"pair {pair} {'M' if mpi_first else 'r'} {mode:17} {label:>4}: Open MPI {got['mpi']['MBps']:9.1f} "
                  f"remora {got['remora']['MBps']:9.1f} MB/s  ratio {ratio:.3f}", flush=True)

    print(f"\n# remora / Open MPI (ob1, btl tcp,self), loopback, window {a.window}; median of {a.pairs} "
          f"back-to-back pairs (M: Open MPI ran first, r: remora first); above 1: remora faster")
    print(f"# {'metric':22} {'Open MPI':>10} {'remora':>10} {'ratio':>7}   per pair")
    summary = []
    for (mode, label), rs in rows.items():
        if not rs:
            continue
        med = lambda xs: statistics.median(xs)
        entry = {"mode": mode, "size": label, "mpi_MBps": med([r["mpi"]["MBps"] for r in rs]),
                 "remora_MBps": med([r["remora"]["MBps"] for r in rs]), "median_ratio": med([r["ratio"] for r in rs]),
                 "ratios": [r["ratio"] for r in rs]}
        line = (f"  {mode + ' ' + label:22} {entry['mpi_MBps']:10.1f} {entry['remora_MBps']:10.1f} "
                f"{entry['median_ratio']:7.3f}   " + " ".join(f"{r['ratio']:.3f}" for r in rs))
        if all("cpu_seconds" in r["mpi"] and "cpu_seconds" in r["remora"] for r in rs):
            per_gb = lambda r, who: r[who]["cpu_seconds"] / (r[who]["MBps"] * r[who]["seconds"] / 1000.0)
            entry["mpi_cpu_s_per_GB"] = med([per_gb(r, "mpi") for r in rs])
            entry["remora_cpu_s_per_GB"] = med([per_gb(r, "remora") for r in rs])
            line += (f"   (CPU s/GB, both ranks: Open MPI {entry['mpi_cpu_s_per_GB']:.3f}, "
                     f"remora {entry['remora_cpu_s_per_GB']:.3f})")
        print(line)
        summary.append(entry)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": "compare_mpi", "mpirun": MPIRUN, "window": a.window, "pairs": a.pairs,
                       "results": summary, "runs": {f"{m} {s}": rs for (m, s), rs in rows.items()}}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    return 4 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
