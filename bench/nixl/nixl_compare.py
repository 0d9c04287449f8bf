#!/usr/bin/env python3
"""bench/nixl/nixl_compare.py — the REMORA NIXL backend (libplugin_REMORA.so) against NIXL's
own UCX backend over TCP (UCX_TLS=tcp), with the same NIXL agents, memory and descriptor
lists (bench/nixl/worker.py), across two network namespaces joined by a veth pair
(created here, removed at the end; needs root).

For every pair of runs (REMORA then UCX, the order alternating from pair to pair, back to
back; each run a fresh target and initiator process) it measures WRITE and READ of single
buffers (--sizes, MiB) and of a list of --blocks blocks of --block-size bytes, apart on
both sides. It prints per workload and operation the median GB/s of each backend, the
median of the per-pair ratios REMORA/UCX, and the median per-run ratio of REMORA's block
list rate to its 16 MiB single-buffer rate; and the load average before and after.

  sudo python3 bench/nixl/nixl_compare.py --python build/venv/bin/python \\
      --plugin-dir build/release/plugin/nixl --pairs 4
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

p = argparse.ArgumentParser()
p.add_argument("--python", default=sys.executable, help="a Python with nixl-cu12 installed")
p.add_argument("--plugin-dir", default="build/release/plugin/nixl", help="folder holding libplugin_REMORA.so")
p.add_argument("--pairs", type=int, default=4)
p.add_argument("--sizes", default="1,16,64")
p.add_argument("--blocks", type=int, default=256)
p.add_argument("--block-size", type=int, default=64 * 1024)
p.add_argument("--sample-mib", type=int, default=512)
p.add_argument("--backends", default="REMORA,UCX")
p.add_argument("--json", default="")
a = p.parse_args()

tag = str(os.getpid() % 200 + 20)
ns = [f"rnixl{tag}a", f"rnixl{tag}b"]
dev = ["rnx0", "rnx1"]
addr = [f"10.196.{tag}.1", f"10.196.{tag}.2"]


def sh(*argv, check=True):
    r = subprocess.run(argv, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


def setup():
    for n in ns:
        sh("ip", "netns", "del", n, check=False)
        sh("ip", "netns", "add", n)
        sh("ip", "-n", n, "link", "set", "lo", "up")
    sh("ip", "-n", ns[0], "link", "add", dev[0], "type", "veth", "peer", "name", dev[1], "netns", ns[1])
    for i in range(2):
        sh("ip", "-n", ns[i], "addr", "add", addr[i] + "/24", "dev", dev[i])
        sh("ip", "-n", ns[i], "link", "set", dev[i], "up")
    # UCX refuses a device that is not running yet ("No such device"): wait for the
    # carrier and for the addresses to leave the tentative state, at most 10 s.
    for i in range(2):
        for _ in range(100):
            link = sh("ip", "-n", ns[i], "-o", "link", "show", dev[i])
            tentative = "tentative" in sh("ip", "-n", ns[i], "-o", "addr", "show", dev[i])
            if "LOWER_UP" in link and not tentative:
                break
            time.sleep(0.1)
        else:
            sys.exit(f"{dev[i]} in {ns[i]} did not come up")


def teardown():
    for n in ns:
        sh("ip", "netns", "del", n, check=False)


def env_for(backend, side):
    env = dict(os.environ)
    env.pop("NIXL_PLUGIN_DIR", None)
    if backend == "REMORA":
        env["NIXL_PLUGIN_DIR"] = os.path.abspath(a.plugin_dir)
    else:
        # TCP only, on the veth: UCX otherwise advertises the loopback device too, which
        # the other namespace cannot use ("remote loopback").
        env["UCX_TLS"] = "tcp"
        env["UCX_NET_DEVICES"] = dev[side]
    return env


def run(backend):
    common = [a.python, os.path.join(HERE, "worker.py"), "--backend", backend, "--sizes", a.sizes, "--blocks",
              str(a.blocks), "--block-size", str(a.block_size), "--sample-mib", str(a.sample_mib)]
    target = subprocess.Popen(["ip", "netns", "exec", ns[1], *common, "--role", "target"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env_for(backend, 1))
    # NIXL's own log lines go to stdout too: ours are the ones with our prefixes.
    line = ""
    for line in target.stdout:
        if line.startswith("MD "):
            break
    if not line.startswith("MD "):
        target.kill()
        sys.exit(f"{backend} target did not start")
    init = subprocess.Popen(["ip", "netns", "exec", ns[0], *common, "--role", "initiator"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env_for(backend, 0))
    init.stdin.write(line)
    init.stdin.flush()
    results = {}
    ended = False
    for out in init.stdout:
        w = out.split()
        if w and w[0] == "RES":
            results[(w[1], w[2])] = int(w[3]) / float(w[4]) / 1e9
        elif w and w[0] == "END":
            ended = True
            break
    rc = init.wait(timeout=600)
    if ended and rc != 0:
        # NIXL processes with the UCX backend may crash in their exit handlers (libnl):
        # after END every measurement is in.
        print(f"({backend} initiator ended with {rc} after its last measurement)", flush=True)
        rc = 0
    target.stdin.write("quit\n")
    target.stdin.flush()
    try:
        target.wait(timeout=30)
    except subprocess.TimeoutExpired:
        target.kill()
    if rc != 0 or not results:
        sys.exit(f"{backend} initiator failed (exit {rc})")
    return results


def main():
    backends = a.backends.split(",")
    load_before = open("/proc/loadavg").read().split()[:3]
    setup()
    runs = {b: [] for b in backends}
    try:
        for pair in range(a.pairs):
            order = backends if pair % 2 == 0 else list(reversed(backends))
            for b in order:
                runs[b].append(run(b))
                print(f"pair {pair} {b}: " + ", ".join(f"{k[0]} {k[1]} {v:.2f}" for k, v in runs[b][-1].items()),
                      flush=True)
    finally:
        teardown()
    load_after = open("/proc/loadavg").read().split()[:3]
    keys = list(runs[backends[0]][0].keys())
    print()
    print(f"{'workload':>12} {'op':>5} " + " ".join(f"{b + ' GB/s':>12}" for b in backends) +
          (f" {'ratio':>7} {'per-pair ratios'}" if len(backends) == 2 else ""))
    report = {"load_before": load_before, "load_after": load_after, "rows": []}
    for k in keys:
        med = {b: statistics.median(r[k] for r in runs[b]) for b in backends}
        row = {"workload": k[0], "op": k[1], **{b: med[b] for b in backends}}
        line = f"{k[0]:>12} {k[1]:>5} " + " ".join(f"{med[b]:>12.3f}" for b in backends)
        if len(backends) == 2:
            ratios = [x[k] / y[k] for x, y in zip(runs[backends[0]], runs[backends[1]])]
            row["ratio"] = statistics.median(ratios)
            row["ratios"] = ratios
            line += f" {row['ratio']:>7.2f} " + " ".join(f"{r:.2f}" for r in ratios)
        report["rows"].append(row)
        print(line)
    block_key = f"{a.blocks}x{a.block_size // 1024}KiB"
    for b in backends:
        for op in ("WRITE", "READ"):
            if (block_key, op) in runs[b][0] and ("16MiB", op) in runs[b][0]:
                r = [x[(block_key, op)] / x[("16MiB", op)] for x in runs[b]]
                print(f"{b} {op}: {block_key} list / one 16 MiB buffer, per run: " + " ".join(f"{v:.2f}" for v in r) +
                      f" (median {statistics.median(r):.2f})")
                report[f"{b}_{op}_blocks_vs_16MiB"] = r
    print(f"load average before {' '.join(load_before)}, after {' '.join(load_after)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
