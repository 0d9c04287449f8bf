#!/usr/bin/env python3
"""bench/nixl/nixl_compare.py — the REMORA NIXL backend (libplugin_REMORA.so) against NIXL's
own UCX backend over TCP (UCX_TLS=tcp, UCX_NET_DEVICES the veth), with the same NIXL agents,
memory and descriptor lists (bench/nixl/worker.py), across two network namespaces joined
by a veth pair (created here, removed at the end; needs root).

Each pair of runs is one run of each configuration (REMORA, UCX, and with
--baseline-plugin-dir another build of the plugin, or the same one with --baseline-env
settings, as "base"), back to back, the order
rotating from pair to pair; each run is a fresh target and initiator process that
measure every workload in interleaved rounds (worker.py): WRITE and READ of single
buffers (--sizes MiB) and of a list of --blocks blocks of --block-size bytes, apart on
both sides. Printed: per workload and operation the median GB/s of each configuration
(median of its rounds, then of its runs), the median of the per-pair ratios REMORA/UCX
(and REMORA/base), and for each configuration the median over all rounds of the block
list's rate against one 16 MiB buffer's in the same round; and the load average before
and after. OPENBLAS_NUM_THREADS=1 for every process: NumPy's BLAS threads otherwise spin
on this 2-vCPU host and take CPU from whichever backend runs.

  sudo python3 bench/nixl/nixl_compare.py --python build/venv/bin/python \\
      --plugin-dir build/release/plugin/nixl --pairs 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lib_netns import NamespacePair, sh  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

p = argparse.ArgumentParser()
p.add_argument("--python", default=sys.executable, help="a Python with nixl-cu12 installed")
p.add_argument("--plugin-dir", default="build/release/plugin/nixl", help="folder holding libplugin_REMORA.so")
p.add_argument("--baseline-plugin-dir", default="", help="another build's folder, measured as 'base'")
p.add_argument("--baseline-env", default="", help="VAR=VALUE,... set for 'base' only (e.g. REMORA_STREAMS=4)")
p.add_argument("--pairs", type=int, default=4)
p.add_argument("--rounds", type=int, default=6)
p.add_argument("--sizes", default="1,16,64")
p.add_argument("--blocks", type=int, default=256)
p.add_argument("--block-size", type=int, default=64 * 1024)
p.add_argument("--sample-mib", type=int, default=128)
p.add_argument("--configs", default="REMORA,UCX", help="REMORA, UCX, base (needs --baseline-plugin-dir)")
p.add_argument("--json", default="")
a = p.parse_args()

net = NamespacePair("rnixl", "rnx", 196)
ns, dev, addr = net.ns, net.dev, net.addr
configs = a.configs.split(",")
if a.baseline_plugin_dir and "base" not in configs:
    configs.append("base")


def env_for(config, side):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("NIXL_PLUGIN_DIR") or k.startswith("UCX_"):
            del env[k]
    env["OPENBLAS_NUM_THREADS"] = "1"
    if config == "REMORA":
        env["NIXL_PLUGIN_DIR"] = os.path.abspath(a.plugin_dir)
    elif config == "base":
        env["NIXL_PLUGIN_DIR"] = os.path.abspath(a.baseline_plugin_dir)
        for kv in filter(None, a.baseline_env.split(",")):
            k, v = kv.split("=", 1)
            env[k] = v
    else:
        # TCP only, on the veth: UCX otherwise advertises the loopback device too, which
        # the other namespace cannot use ("remote loopback").
        env["UCX_TLS"] = "tcp"
        env["UCX_NET_DEVICES"] = dev[side]
    return env


def run(config):
    backend = "UCX" if config == "UCX" else "REMORA"
    common = [a.python, os.path.join(HERE, "worker.py"), "--backend", backend, "--sizes", a.sizes, "--blocks",
              str(a.blocks), "--block-size", str(a.block_size), "--sample-mib", str(a.sample_mib), "--rounds",
              str(a.rounds)]
    target = subprocess.Popen(["ip", "netns", "exec", ns[1], *common, "--role", "target"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env_for(config, 1))
    # NIXL's own log lines go to stdout too: ours are the ones with our prefixes.
    line = ""
    for line in target.stdout:
        if line.startswith("MD "):
            break
    if not line.startswith("MD "):
        target.kill()
        sys.exit(f"{config} target did not start")
    init = subprocess.Popen(["ip", "netns", "exec", ns[0], *common, "--role", "initiator"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env_for(config, 0))
    init.stdin.write(line)
    init.stdin.flush()
    results = {}  # (round, workload, op) -> GB/s
    ended = False
    for out in init.stdout:
        w = out.split()
        if w and w[0] == "RES":
            results[(int(w[1]), w[2], w[3])] = int(w[4]) / float(w[5]) / 1e9
        elif w and w[0] == "END":
            ended = True
            break
    rc = init.wait(timeout=900)
    if ended and rc != 0:
        # NIXL processes with the UCX backend may crash in their exit handlers (libnl):
        # after END every measurement is in.
        print(f"({config} initiator ended with {rc} after its last measurement)", flush=True)
        rc = 0
    target.stdin.write("quit\n")
    target.stdin.flush()
    try:
        target.wait(timeout=30)
    except subprocess.TimeoutExpired:
        target.kill()
    if rc != 0 or not results:
        sys.exit(f"{config} initiator failed (exit {rc})")
    return results


def per_run(results):
    """(workload, op) -> the median over the run's rounds."""
    keys = sorted({(w, o) for _, w, o in results})
    return {k: statistics.median(v for (r, w, o), v in results.items() if (w, o) == k) for k in keys}


def main():
    load_before = open("/proc/loadavg").read().split()[:3]
    net.setup(wait_until_up=True)  # UCX refuses a device that is not running yet
    runs = {c: [] for c in configs}
    try:
        for pair in range(a.pairs):
            order = configs[pair % len(configs):] + configs[:pair % len(configs)]
            for c in order:
                runs[c].append(run(c))
                print(f"pair {pair} {c}: " + ", ".join(f"{k[0]} {k[1]} {v:.2f}" for k, v in per_run(runs[c][-1]).items()),
                      flush=True)
    finally:
        net.teardown()
    load_after = open("/proc/loadavg").read().split()[:3]
    medians = {c: [per_run(r) for r in runs[c]] for c in configs}
    keys = list(medians[configs[0]][0].keys())
    ratio_cols = [(x, y) for x, y in (("REMORA", "UCX"), ("REMORA", "base")) if x in configs and y in configs]
    print()
    print(f"{'workload':>12} {'op':>5} " + " ".join(f"{c + ' GB/s':>12}" for c in configs) +
          "".join(f" {x + '/' + y:>12} (per pair)" for x, y in ratio_cols))
    report = {"command": " ".join(sys.argv), "load_before": load_before, "load_after": load_after, "rows": [],
              "list_vs_16MiB": {}}
    for k in keys:
        row = {"workload": k[0], "op": k[1]}
        line = f"{k[0]:>12} {k[1]:>5} "
        for c in configs:
            row[c] = statistics.median(m[k] for m in medians[c])
            line += f"{row[c]:>12.3f} "
        for x, y in ratio_cols:
            ratios = [mx[k] / my[k] for mx, my in zip(medians[x], medians[y])]
            row[f"{x}/{y}"] = ratios
            line += f" {statistics.median(ratios):>12.2f} (" + " ".join(f"{r:.2f}" for r in ratios) + ")"
        report["rows"].append(row)
        print(line)
    block_key = f"{a.blocks}x{a.block_size // 1024}KiB"
    print()
    for c in configs:
        for op in ("WRITE", "READ"):
            per_round = [run_[(r, block_key, op)] / run_[(r, "16MiB", op)] for run_ in runs[c]
                         for (r, w, o) in run_ if w == block_key and o == op and (r, "16MiB", op) in run_]
            if per_round:
                q = statistics.quantiles(per_round, n=4) if len(per_round) >= 4 else per_round
                print(f"{c:>6} {op:>5}: {block_key} list / one 16 MiB buffer, median of {len(per_round)} rounds "
                      f"{statistics.median(per_round):.2f} (quartiles {q[0]:.2f}-{q[-1]:.2f})")
                report["list_vs_16MiB"][f"{c} {op}"] = per_round
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
