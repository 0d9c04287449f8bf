#!/usr/bin/env python3
"""bench/ab_builds.py — two builds of remora against each other on the same path (loopback, or --netns):
`remora bench p2p` (or, with --bench rma, `remora bench rma` puts and gets) bandwidth and
latency of the baseline build and of the candidate, in back-to-back pairs of alternating
order (this host's throughput flips between a slow and a fast state for seconds to
minutes, so only adjacent runs compare), and the median of the per-pair ratios
candidate/baseline. Bandwidth: above 1 is faster; latency (the average): below 1 is
faster. Every run checks its data (both benchmarks verify each size).

  bench/ab_builds.py --baseline OLD/tools/remora --candidate NEW/tools/remora [--pairs 6]
                     [--bench p2p|rma] [--bw-sizes 64K,1M,16M] [--bw-iters 200]
                     [--lat-sizes 8,4K] [--lat-iters 20000] [--json FILE]

--bench rma runs the modes put_bw and get_bw at --bw-sizes and put_lat, get_lat and
notify_lat (where both builds have it) at --lat-sizes (both 8,64K,16M unless given),
with the tool's own iteration counts scaled by size unless --bw-iters / --lat-iters are
given.

--bench coll runs `remora bench coll --op allreduce -n 2` (two ranks of this host, or
--ranks N; --coll-ops for other collectives, comma-separated; no p2p reference) at
--lat-sizes (default 4K), --lat-iters timed operations per size (default: the tool's,
scaled by size), and compares the out-of-place time per operation of the slowest rank
(below 1 is faster; a broadcast's in-place time). With --netns its ranks alternate between the two namespaces (ranks
0, 2, ... in one, 1, 3, ... in the other: two hosts of N/2 ranks each; --placement block:
the first N/2 in one, the rest in the other, as block-placing launchers do; --first K: the
first K in one, the rest in the other, hosts of different sizes), started as a launcher
would (REMORA_RANK, REMORA_WORLD_SIZE, REMORA_STORE).

One build against itself under two environments (a setting's cost, e.g. REMORA_ENCRYPT):
  bench/ab_builds.py --baseline B/tools/remora --candidate B/tools/remora \
      --baseline-env REMORA_SAME_HOST=off \
      --candidate-env REMORA_SAME_HOST=off,REMORA_ENCRYPT=on,REMORA_AUTH_KEY=bench
(each --*-env is comma-separated NAME=VALUE added to that side's environment).

--netns: the two processes of each run in two network namespaces joined by a veth
(TCP through the kernel's veth, as between hosts, instead of loopback): the follower
(`bench ... --listen`) in one, the driver (`--peer`) in the other, each with its side's
environment. Needs root; the namespaces are made for the run and removed after it.
--rate 2gbit: each end of the veth sends at most that (tc's token bucket), so that the
link between the "hosts" is slower than the copies on either side of it, as a NIC is.

A baseline build of an earlier commit: `git worktree add /tmp/old <commit>`, then
`cmake --preset release && cmake --build build/release --target remora_tool` there.
Exit code 0, or 1 when a run failed (its output is printed). On a terminal a progress
line on stderr says which run is going and about how long is left (bench/lib_progress.py).
"""
import argparse
import itertools
import select
import json
import os
import statistics
import subprocess
import sys
import tempfile

from lib_progress import Progress


def env_of(spec):
    """The environment of one side: ours plus the comma-separated NAME=VALUE of `spec`."""
    env = dict(os.environ)
    for item in filter(None, (spec or "").split(",")):
        name, _, value = item.partition("=")
        env[name] = value
    return env


NETNS = ("remora-ab-a", "remora-ab-b")
NETNS_ADDR = "10.231.7.2"
_ports = itertools.count(47100)
# The coll runs' store: above the kernel's ephemeral ports (32768-60999 by default), which
# the ranks' own listeners take, so that no earlier run's leftover holds it.
_store_ports = itertools.count(61100)


def netns_up(rate=None):
    """Two namespaces and a veth between them (10.231.7.1 and NETNS_ADDR); with `rate`
    (tc's syntax, e.g. 2gbit), each end sends at most that (a token bucket), as a NIC
    would between hosts."""
    netns_down()
    a, b = NETNS
    cmds = [f"ip netns add {a}", f"ip netns add {b}",
            f"ip link add rab-a netns {a} type veth peer name rab-b netns {b}",
            f"ip -n {a} addr add 10.231.7.1/24 dev rab-a", f"ip -n {b} addr add {NETNS_ADDR}/24 dev rab-b",
            f"ip -n {a} link set rab-a up", f"ip -n {b} link set rab-b up",
            f"ip -n {a} link set lo up", f"ip -n {b} link set lo up"]
    if rate:
        cmds += [f"ip netns exec {ns} tc qdisc add dev {dev} root tbf rate {rate} burst 1mbit latency 50ms"
                 for ns, dev in ((a, "rab-a"), (b, "rab-b"))]
    for cmd in cmds:
        subprocess.run(cmd.split(), check=True)


def netns_down():
    for ns in NETNS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_follower(binary, bench, env, ns=NETNS[1], address=None, listen=None):
    """The --listen side in namespace `ns` (the second one), once it says it is waiting for a
    driver; (the process, the address the driver reaches it at). It listens on `listen`
    (default: `address`, default: NETNS_ADDR at a new port)."""
    address = address or f"{NETNS_ADDR}:{next(_ports)}"
    proc = subprocess.Popen(["ip", "netns", "exec", ns, binary, "bench", bench, "--listen", listen or address],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0, env=env)
    seen = b""
    while b"waiting for a driver" not in seen:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if not chunk:
            proc.kill()
            raise SystemExit(f"ab_builds: the follower did not start listening on {address}:\n{seen.decode()}")
        seen += chunk
    return proc, address


def run_pair(command, binary, bench, mode, env, netns):
    """`command` on this host, or as the driver in the first namespace with a follower in the other."""
    follower = None
    if netns:
        follower, address = start_follower(binary, bench, env)
        command = ["ip", "netns", "exec", NETNS[0]] + command + ["--peer", address]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if follower:
        try:
            follower.wait(timeout=60)
        except subprocess.TimeoutExpired:
            follower.kill()
        follower.stdout.close()
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"ab_builds: {binary} bench {bench} --mode {mode} failed (exit {proc.returncode})")


def namespace_of(r, ranks, placement):
    """Rank r's namespace: r % 2 (cyclic), 2r // ranks (block), or r >= K (first:K)."""
    if placement == "cyclic":
        return NETNS[r % 2]
    if placement == "block":
        return NETNS[2 * r // ranks]
    return NETNS[0 if r < int(placement.split(":")[1]) else 1]


def run_coll_across(command, env, ranks, placement):
    """`remora bench coll` as `ranks` processes, each in its namespace_of, started as a
    launcher would; rank 0 (in the first namespace) hosts the store and writes the JSON."""
    store = f"10.231.7.1:{next(_store_ports)}"
    at = command.index("--json")
    others = command[:at] + command[at + 2:]
    procs = []
    for r in range(ranks):
        rank_command = command if r == 0 else others
        rank_env = dict(env, REMORA_RANK=str(r), REMORA_WORLD_SIZE=str(ranks), REMORA_STORE=store)
        procs.append(subprocess.Popen(["ip", "netns", "exec", namespace_of(r, ranks, placement)] + rank_command, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, env=rank_env))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        for r, out in enumerate(outputs):
            sys.stderr.write(f"--- rank {r}:\n{out}")
        raise SystemExit(f"ab_builds: {command[0]} bench coll across two namespaces failed")


def run_bench(binary, bench, mode, sizes, iters, env=None, netns=False, ranks=2, placement="cyclic"):
    """One `remora bench p2p|rma` run; {size: bandwidth MB/s (a *bw mode) or average latency us}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        if bench == "coll":
            command = [binary, "bench", "coll", "--op", mode, "-n", str(ranks), "--sizes", sizes, "--no-reference",
                       "--json", out]
        else:
            command = [binary, "bench", bench, "--mode", mode, "--sizes", sizes, "--json", out]
        if iters:
            command += ["--iters", str(iters)]
        if bench == "coll" and netns:
            run_coll_across(command, env, ranks, placement)
        else:
            run_pair(command, binary, bench, mode, env, netns)
        with open(out) as f:
            results = json.load(f)["results"]
    if bench == "coll":
        wrong = sum((r["out_of_place"] or {}).get("wrong", 0) + (r["in_place"] or {}).get("wrong", 0) for r in results)
        if wrong:
            raise SystemExit(f"ab_builds: {binary} bench coll --op {mode}: {wrong} wrong results")
        # Broadcast has only the in-place form.
        return {r["size"]: (r["out_of_place"] or r["in_place"])["time_us"] for r in results}
    key = (lambda r: r["bandwidth_MBps"]) if mode.endswith("bw") else (lambda r: r["latency_us"]["avg"])
    return {r["size"]: key(r) for r in results}


def cases_of(a):
    """(mode, sizes, iters) of each run of one pair."""
    if a.bench == "coll":
        return [(op, a.lat_sizes or "4K", a.lat_iters) for op in a.coll_ops.split(",")]
    if a.bench == "p2p":
        return [("bw", a.bw_sizes or "64K,1M,16M", 200 if a.bw_iters is None else a.bw_iters),
                ("lat", a.lat_sizes or "8,4K", 20000 if a.lat_iters is None else a.lat_iters)]
    bw, lat = a.bw_sizes or "8,64K,16M", a.lat_sizes or "8,64K,16M"
    cases = [("put_bw", bw, a.bw_iters), ("get_bw", bw, a.bw_iters), ("put_lat", lat, a.lat_iters),
             ("get_lat", lat, a.lat_iters)]
    if all(knows_notify_lat(tool) for tool in (a.baseline, a.candidate)):  # builds before it lack the mode
        cases.append(("notify_lat", lat, a.lat_iters))
    return cases


def knows_notify_lat(tool):
    out = subprocess.run([tool, "bench", "rma", "--help"], capture_output=True, text=True, check=False).stdout
    return "notify_lat" in out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--bench", choices=["p2p", "rma", "coll"], default="p2p")
    ap.add_argument("--bw-sizes")
    ap.add_argument("--bw-iters", type=int)
    ap.add_argument("--lat-sizes")
    ap.add_argument("--lat-iters", type=int)
    ap.add_argument("--baseline-env")
    ap.add_argument("--candidate-env")
    ap.add_argument("--json")
    ap.add_argument("--ranks", type=int, default=2, help="--bench coll: ranks of this host (default 2)")
    ap.add_argument("--coll-ops", default="allreduce", help="--bench coll: the collectives, comma-separated")
    ap.add_argument("--netns", action="store_true", help="run each pair of processes across two network namespaces")
    ap.add_argument("--placement", choices=["cyclic", "block"], default="cyclic",
                    help="--bench coll --netns: ranks alternate between the namespaces, or fill one then the other")
    ap.add_argument("--first", type=int, help="--bench coll --netns: the first K ranks in one namespace, the rest in the other")
    ap.add_argument("--rate", help="--netns: each end of the veth sends at most this (tc's syntax: 2gbit)")
    a = ap.parse_args()
    if a.rate and not a.netns:
        ap.error("--rate needs --netns")
    if a.first is not None:
        if not a.netns or not 0 < a.first < a.ranks:
            ap.error("--first K needs --netns and 0 < K < --ranks")
        a.placement = f"first:{a.first}"
    if a.netns:
        netns_up(a.rate)
    try:
        return compare(a)
    finally:
        if a.netns:
            netns_down()


def compare(a):
    envs = {"baseline": env_of(a.baseline_env), "candidate": env_of(a.candidate_env)}
    cases = cases_of(a)
    ratios, values = {}, {}
    progress = Progress(a.pairs * len(cases) * 2)
    for pair in range(a.pairs):
        order = [("baseline", a.baseline), ("candidate", a.candidate)]
        if pair % 2 == 1:
            order.reverse()
        for mode, sizes, iters in cases:
            got = {}
            for name, binary in order:
                progress.step(f"pair {pair + 1} of {a.pairs}: {name} bench {a.bench} --mode {mode} --sizes {sizes}")
                got[name] = run_bench(binary, a.bench, mode, sizes, iters, envs[name], a.netns, a.ranks, a.placement)
            for size, base in got["baseline"].items():
                cand = got["candidate"][size]
                ratios.setdefault((mode, size), []).append(cand / base)
                values.setdefault((mode, size), []).append((base, cand))
                progress.note(f"pair {pair} {mode:10} {size:>9}: baseline {base:10.2f} candidate {cand:10.2f} "
                              f"ratio {cand / base:.3f}", sys.stdout)
    progress.end()
    print(f"\n# candidate/baseline, median of {a.pairs} back-to-back pairs (bw: >1 faster; lat: <1 faster)")
    print(f"# {'mode':10} {'size':>9} {'ratio':>7}   per pair")
    for (mode, size), rs in ratios.items():
        unit = "MB/s" if mode.endswith("bw") else "us per operation" if a.bench == "coll" else "us (avg)"
        print(f"  {mode:10} {size:>9} {statistics.median(rs):7.3f}   " + " ".join(f"{r:.3f}" for r in rs) + f"   ({unit})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"baseline": a.baseline, "candidate": a.candidate, "baseline_env": a.baseline_env,
                       "candidate_env": a.candidate_env, "bench": a.bench, "ranks": a.ranks, "pairs": a.pairs,
                       "path": "veth between two network namespaces" if a.netns else "loopback",
                       "placement": a.placement,
                       "coll_ops": a.coll_ops if a.bench == "coll" else None,
                       "results": [{"mode": m, "size": s, "median_ratio": statistics.median(rs),
                                    "ratios": rs, "values": values[(m, s)]} for (m, s), rs in ratios.items()]},
                      f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
