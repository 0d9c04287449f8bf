#!/usr/bin/env python3
"""bench/rails.py — what rails (REMORA_RAILS, docs/rails.md) give one transfer: `remora bench
p2p --mode bw` across two network namespaces joined by two veth pairs (two "NICs" per
side, one subnet each), each shaped by tc tbf in both directions (or not: rate `none`),
with both rails against a reference, in back-to-back pairs of alternating order; the
median of the per-pair ratios.

  bench/rails.py --remora build/release/tools/remora [--rates 1gbit,1gbit] [--pairs 6]
                 [--reference one|equal] [--size 64M] [--iters 6] [--json FILE]
                 [--tool remora|iperf3] [--seconds 3] [--baseline OTHER_REMORA]

References: `one`, the first rail alone; `equal`, both rails with REMORA_RAIL_SPLIT=equal,
which splits every transfer equally over them as NCCL's socket transport splits a
message over its sockets. Each message is one transfer (--window 1), timed over --iters
of them after one untimed. Both sides use two data streams in every case (one rail:
REMORA_STREAMS=2 on it; two rails: REMORA_STREAMS=1 per rail), so only where the streams
go differs. The issue's targets: two equal rails at >= 1.9x one rail; 1 Gbit/s + 200
Mbit/s at >= 0.9x the sum (1.08x the fast rail alone); unshaped rails >= 0.97x one rail.
`--baseline` compares two builds instead: both on both rails, --remora against the
baseline's binary (the ratio is the candidate's rate over the baseline's).
`--tool iperf3` runs the same paths under raw TCP instead (two iperf3 processes of one
stream each, both on the first rail or one per rail, for --seconds), so that what the
paths themselves cost can be told from what remora adds.
Needs root, tc and the tbf qdisc; the namespaces are made for the run and removed after.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ab_builds import start_follower

NS = ("remora-rails-a", "remora-rails-b")


def sh(cmd):
    subprocess.run(cmd.split(), check=True)


def up(rates):
    down()
    a, b = NS
    sh(f"ip netns add {a}")
    sh(f"ip netns add {b}")
    for ns in NS:
        sh(f"ip -n {ns} link set lo up")
    for i, rate in enumerate(rates):
        sh(f"ip link add rra{i} netns {a} type veth peer name rrb{i} netns {b}")
        sh(f"ip -n {a} addr add 10.232.{i}.1/24 dev rra{i}")
        sh(f"ip -n {b} addr add 10.232.{i}.2/24 dev rrb{i}")
        sh(f"ip -n {a} link set rra{i} up")
        sh(f"ip -n {b} link set rrb{i} up")
        for ns, dev in ((a, f"rra{i}"), (b, f"rrb{i}")):
            if rate == "none":
                continue
            sh(f"ip netns exec {ns} tc qdisc add dev {dev} root tbf rate {rate} burst 256kb latency 20ms")


def down():
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run(remora, setup, size, iters, port):
    """One transfer run; MB/s. `setup`: "one" (the first rail only), "two" (both rails,
    chunks by rate) or "equal" (both rails, REMORA_RAIL_SPLIT=equal)."""
    base = dict(os.environ, REMORA_SAME_HOST="off")
    if setup == "one":
        env_a = dict(base, REMORA_RAILS="=rra0", REMORA_STREAMS="2")
        env_b = dict(base, REMORA_RAILS="=rrb0", REMORA_STREAMS="2")
    else:
        split = "equal" if setup == "equal" else "rate"
        env_a = dict(base, REMORA_RAILS="rra", REMORA_STREAMS="1", REMORA_RAIL_SPLIT=split)
        env_b = dict(base, REMORA_RAILS="rrb", REMORA_STREAMS="1", REMORA_RAIL_SPLIT=split)
    # The listener takes connections on every address (a listener bound to one address
    # advertises that rail only); the driver reaches it at the first rail's.
    follower, address = start_follower(remora, "p2p", env_a, ns=NS[0], address=f"10.232.0.1:{port}",
                                       listen=f"0.0.0.0:{port}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        # One transfer at a time (--window 1): each message is the transfer the issue means.
        proc = subprocess.run(["ip", "netns", "exec", NS[1], remora, "bench", "p2p", "--mode", "bw", "--sizes",
                               str(size), "--iters", str(iters), "--warmup", "1", "--window", "1", "--json", out,
                               "--peer", address],
                              capture_output=True, text=True, timeout=600, env=env_b)
        try:
            follower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            follower.kill()  # its run is over: the driver has its figures
            follower.wait()
        follower.stdout.close()
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"rails.py: the {setup} run failed (exit {proc.returncode})")
        with open(out) as f:
            return json.load(f)["results"][0]["bandwidth_MBps"]


def wait_listening(port, deadline_s=10):
    """Until something in the first namespace listens on TCP `port` (bounded)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        out = subprocess.run(["ip", "netns", "exec", NS[0], "ss", "-Hltn", f"sport = :{port}"],
                             capture_output=True, text=True).stdout
        if out.strip():
            return
        time.sleep(0.02)
    raise SystemExit(f"rails.py: iperf3 did not listen on port {port}")


def run_iperf3(setup, seconds, port):
    """The same paths under raw TCP (`--tool iperf3`); MB/s received. Two iperf3 clients
    of one stream each, at once, summed: "one", both on the first rail; "two", one on each
    rail (from each rail's address to the other side's on that rail). Two processes in
    both, so that only the paths differ."""
    rails = [0, 0] if setup == "one" else [0, 1]
    servers, clients = [], []
    try:
        for k, i in enumerate(rails):
            servers.append(subprocess.Popen(["ip", "netns", "exec", NS[0], "iperf3", "-s", "-1", "-B",
                                             f"10.232.{i}.1", "-p", str(port + k)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_listening(port + k)
        for k, i in enumerate(rails):
            clients.append(subprocess.Popen(
                ["ip", "netns", "exec", NS[1], "iperf3", "-c", f"10.232.{i}.1", "-B", f"10.232.{i}.2", "-p",
                 str(port + k), "-t", str(seconds), "-J"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        total = 0.0
        for c in clients:
            out, err = c.communicate(timeout=seconds + 30)
            if c.returncode != 0:
                raise SystemExit(f"rails.py: iperf3 failed: {out[-400:]}{err[-400:]}")
            total += json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
        return total
    finally:
        for srv in servers:
            srv.kill()
            srv.wait()


def size_of(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--remora", required=True)
    ap.add_argument("--rates", default="1gbit,1gbit", help="tbf rate of each rail, both directions; none: unshaped")
    ap.add_argument("--reference", choices=("one", "equal"), default="one",
                    help="one: the first rail alone; equal: both rails split equally (REMORA_RAIL_SPLIT=equal)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--json")
    ap.add_argument("--tool", choices=("remora", "iperf3"), default="remora",
                    help="iperf3: the same paths and setups under raw TCP (iperf3 -t --seconds), to tell "
                         "what the paths themselves cost from what remora adds")
    ap.add_argument("--seconds", type=int, default=3, help="iperf3's time per run")
    ap.add_argument("--baseline", help="another build's remora: both builds on both rails, --remora against it")
    a = ap.parse_args()
    if a.tool == "iperf3" and a.reference == "equal":
        raise SystemExit("rails.py: --tool iperf3 compares with --reference one")
    if a.baseline and a.tool == "iperf3":
        raise SystemExit("rails.py: --baseline compares two remora builds")
    rates = a.rates.split(",")
    if len(rates) != 2:
        raise SystemExit("rails.py: --rates takes two rates")
    up(rates)
    port = 47300
    rows = []
    try:
        ref = "baseline" if a.baseline else a.reference
        for pair in range(a.pairs):
            order = (ref, "two") if pair % 2 == 0 else ("two", ref)
            got = {}
            for setup in order:
                port += 1
                if a.tool == "iperf3":
                    port += 1  # two ports a run
                    got[setup] = run_iperf3(setup, a.seconds, port)
                elif setup == "baseline":
                    got[setup] = run(a.baseline, "two", size_of(a.size), a.iters, port)
                else:
                    got[setup] = run(a.remora, setup, size_of(a.size), a.iters, port)
            ratio = got["two"] / got[ref]
            rows.append({"pair": pair, f"{ref}_MBps": got[ref], "two_rails_MBps": got["two"], "ratio": ratio})
            print(f"pair {pair}: {ref:5} {got[ref]:8.1f} MB/s, two rails {got['two']:8.1f} MB/s, ratio {ratio:.3f}",
                  flush=True)
    finally:
        down()
    median = statistics.median(r["ratio"] for r in rows)
    what = f"iperf3, {a.seconds} s" if a.tool == "iperf3" else a.size
    print(f"# two rails / {ref} ({a.rates}, {what}), median of {a.pairs} pairs: {median:.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tool": a.tool, "rates": rates, "reference": ref, "baseline": a.baseline, "size": a.size, "iters": a.iters,
                       "seconds": a.seconds if a.tool == "iperf3" else None, "pairs": rows, "median_ratio": median},
                      f, indent=1)


if __name__ == "__main__":
    main()
