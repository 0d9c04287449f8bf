#!/usr/bin/env python3
"""bench/nccl_compare.py — the NCCL net plugin against a reference sender built like NCCL's
socket transport (tests/nccl/bench.cc), in one run, across two network namespaces joined
by a veth pair (created here, removed at the end; needs root).

For every pair of runs (reference then plugin, the order alternating from pair to pair,
back to back) and every scenario:
  none   nothing slowed
  slow   one of the connection's data streams shaped with tc on the sender's veth: an htb
         class at --slow-rate with a tbf leaf (20 ms of queue), and a u32 filter on that
         stream's source port (the established connection that carried the most bytes in the
         warm-up, from `ss -tni`, so a data stream and not remora's control stream).
It prints per-size medians of MB/s for each transport, the median of the per-pair
ratios plugin/reference, one-way latency, and the load average before and after (the
numbers are only comparable at a similar load). With --baseline-plugin, a second build of
the plugin (say, main's) runs in the same pairs as a third transport, the order rotating
from pair to pair, and the table adds its MB/s and the median per-pair ratio
plugin/baseline: a before/after comparison measured under the same load.

  sudo python3 bench/nccl_compare.py --build build/release --pairs 4 --streams 4 \
      --sizes 65536,1048576,4194304,16777216 --slow-rate 1gbit

On a terminal a progress line on stderr says which run is going and about how long is
left (bench/lib_progress.py).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from lib_netns import NamespacePair, sh
from lib_progress import Progress

p = argparse.ArgumentParser()
p.add_argument("--build", default="build/release")
p.add_argument("--pairs", type=int, default=4)
p.add_argument("--streams", type=int, default=4)
p.add_argument("--sizes", default="65536,1048576,4194304,16777216")
p.add_argument("--iters", type=int, default=16)
p.add_argument("--sample-mib", type=int, default=256,
               help="MiB per bandwidth sample (at most --iters x 64 messages); longer samples are steadier on a noisy host")
p.add_argument("--slow-rate", default="1gbit")
p.add_argument("--scenarios", default="none,slow")
p.add_argument("--baseline-plugin", default="", help="another build's libnccl-net-remora.so, measured as 'baseline'")
a = p.parse_args()

harness = os.path.join(a.build, "tests/nccl/remora_nccl_harness")
plugin = os.path.abspath(os.path.join(a.build, "plugin/nccl/libnccl-net-remora.so"))
plugins = {"plugin": plugin, "baseline": os.path.abspath(a.baseline_plugin) if a.baseline_plugin else ""}
net = NamespacePair("rnccl", "rnc", 197)
ns, dev, addr = net.ns, net.dev, net.addr


def busiest_sport():
    out = sh("ip", "netns", "exec", ns[0], "ss", "-tniH", "state", "established")
    best, port = -1, None
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s*\d+\s+\d+\s+(\S+):(\d+)\s+(\S+):(\d+)", line)
        if not m or not m.group(1).startswith(addr[0]):
            continue
        info = lines[i + 1] if i + 1 < len(lines) else ""
        b = re.search(r"bytes_acked:(\d+)", info)
        acked = int(b.group(1)) if b else 0
        if acked > best:
            best, port = acked, int(m.group(2))
    return port


def shape(port):
    """htb at the root: unclassified packets go straight through (default 0, its direct
    queue); the slowed stream's packets, picked by a u32 filter on the source port, go
    to a class limited to --slow-rate. (This kernel has htb and tbf but not prio/netem.)"""
    d = dev[0]
    tc = lambda *x: sh("ip", "netns", "exec", ns[0], "tc", *x)
    tc("qdisc", "add", "dev", d, "root", "handle", "1:", "htb", "default", "0")
    tc("class", "add", "dev", d, "parent", "1:", "classid", "1:20", "htb", "rate", a.slow_rate, "ceil", a.slow_rate,
       "quantum", "60000")
    # The class's own queue would hold up to txqueuelen 64 KiB GSO packets (hundreds of
    # ms at the slow rate), hiding the slowness from the sender's socket; a tbf leaf
    # bounds the queueing delay as a slow link's buffer would.
    tc("qdisc", "add", "dev", d, "parent", "1:20", "handle", "20:", "tbf", "rate", a.slow_rate, "burst", "256kb",
       "latency", "20ms")
    tc("filter", "add", "dev", d, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "sport",
       str(port), "0xffff", "flowid", "1:20")


def unshape():
    sh("ip", "netns", "exec", ns[0], "tc", "qdisc", "del", "dev", dev[0], "root", check=False)


def run(transport, scenario):
    env = dict(os.environ, REMORA_STREAMS=str(a.streams), REMORA_NCCL_IFNAME="=" + dev[1])
    # "baseline" is the plugin transport of the harness, loaded from the other build.
    common = ["--transport", "reference" if transport == "reference" else "plugin",
              "--plugin", plugins.get(transport, plugin), "--streams", str(a.streams), "--sizes", a.sizes,
              "--iters", str(a.iters), "--sample-mib", str(a.sample_mib)]
    recv = subprocess.Popen(["ip", "netns", "exec", ns[1], harness, "bench-recv", *common, "--address", addr[1]],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    first = recv.stdout.readline().split()
    senv = dict(env, REMORA_NCCL_IFNAME="=" + dev[0])
    target = ["--address", first[1]] if transport == "reference" else ["--handle", first[1]]
    send = subprocess.Popen(["ip", "netns", "exec", ns[0], harness, "bench-send", *common, *target],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=senv)
    results = {}
    port = None
    for line in send.stdout:
        w = line.split()
        if not w:
            continue
        if w[0] == "PEER":
            recv.stdin.write(line)
            recv.stdin.flush()
        elif w[0] == "WARM":
            if scenario == "slow":
                port = busiest_sport()
                shape(port)
            send.stdin.write("go\n")
            send.stdin.flush()
        elif w[0] == "RESULT":
            results[int(w[2])] = (float(w[3]), float(w[4]))
        elif w[0] in ("FAIL", "DONE"):
            if w[0] == "FAIL":
                print(line.strip(), file=sys.stderr)
            break
    send.wait(timeout=120)
    recv.wait(timeout=120)
    unshape()
    return results, port


def main():
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, tc)")
    load_before = os.getloadavg()
    net.setup()
    try:
        scenarios = a.scenarios.split(",")
        transports = ["reference", "plugin"] + (["baseline"] if a.baseline_plugin else [])
        data = {s: {t: [] for t in transports} for s in scenarios}
        progress = Progress(a.pairs * len(scenarios) * len(transports))
        for i in range(a.pairs):
            for s in scenarios:
                k = i % len(transports)  # two transports: reference first in even pairs, plugin first in odd
                order = transports[k:] + transports[:k]
                for t in order:
                    progress.step(f"pair {i + 1} of {a.pairs}, scenario {s}: {t}")
                    res, port = run(t, s)
                    data[s][t].append(res)
                    progress.note(f"pair {i} {s:4} {t:9} " +
                                  " ".join(f"{k}:{v[0]:.0f}MB/s" for k, v in sorted(res.items())) +
                                  (f" (slowed sport {port})" if port else ""), sys.stdout)
        progress.end()
        sizes = [int(x) for x in a.sizes.split(",")]
        load_after = os.getloadavg()
        print(f"\n# {a.pairs} pairs, {a.streams} streams, slow stream at {a.slow_rate}; medians; load average "
              f"{load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f} before, "
              f"{load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f} after")
        med = lambda xs, digits=1: f"{statistics.median(xs):.{digits}f}" if xs else "-"

        def ratios(s, z, num, den):
            return [n[z][0] / d[z][0] for n, d in zip(data[s][num], data[s][den]) if z in n and z in d and d[z][0] > 0]

        extra = " baseline MB/s | plugin/baseline |" if a.baseline_plugin else ""
        print("| scenario | size | reference MB/s | plugin MB/s | median ratio |" + extra + " ref lat us | plugin lat us |" +
              (" baseline lat us |" if a.baseline_plugin else ""))
        print("|---|---|---|---|---|" + ("---|---|" if a.baseline_plugin else "") + "---|---|" +
              ("---|" if a.baseline_plugin else ""))
        for s in scenarios:
            for z in sizes:
                mbs = {t: [r[z][0] for r in data[s][t] if z in r] for t in transports}
                lat = {t: [r[z][1] for r in data[s][t] if z in r and r[z][1] >= 0] for t in transports}
                cells = [med(mbs["reference"]), med(mbs["plugin"]), med(ratios(s, z, "plugin", "reference"), 2)]
                if a.baseline_plugin:
                    cells += [med(mbs["baseline"]), med(ratios(s, z, "plugin", "baseline"), 2)]
                cells += [med(lat["reference"]), med(lat["plugin"])] + ([med(lat["baseline"])] if a.baseline_plugin else [])
                print(f"| {s} | {z} | " + " | ".join(cells) + " |")
    finally:
        unshape()
        net.teardown()


main()
