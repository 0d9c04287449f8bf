#!/usr/bin/env python3
"""bench/failover_time.py — how long a transfer over two rails runs slow when one rail's
link goes down (REMORA_RAILS and failover, docs/rails.md): two network namespaces joined
by two veth pairs (one subnet each), each shaped by tc tbf in both directions; a sender
sends 4 MiB messages one at a time over both rails and timestamps each completion; after
--before seconds it sets its second rail's interface down (--break down), or its first,
which carries the control stream (--break control-rail), or resets every
data stream of both rails at once (--break reset-all: `ss -K` of each rail's connections
but the control stream's), resets the control stream only (--break control), or every
connection of the endpoint at once (--break everything), and goes on for --after seconds.

  bench/failover_time.py [--python PY] [--rate 1gbit] [--peer-timeout-ms 1000]
                         [--break down|control-rail|reset-all|control|everything]
                         [--runs 3]
                         [--before 2] [--after 6]
                         [--json FILE]

Reported per run: the rate before the link went down (both rails), the rate over the
last 2 s (one rail), the longest gap between two completions, and the recovery time:
from the link-down to the start of the first 0.5 s window that runs at >= 0.9x the
one-rail rate (with the resets: the rate once everything is back). With rails, a stream
whose chunks go unconfirmed for the peer timeout (REMORA_PEER_TIMEOUT_MS) while the other
rail works is retired and its chunks are sent again, so the recovery time should be about
the peer timeout; when the control stream's rail goes down, the control stream is first
connected again over the other rail at the peer timeout, and the data stream of the dead
rail is retired a peer timeout after that, so about twice the peer timeout; after the resets the streams and the control stream are connected again
at once (the control stream's frames the peer had not handled replayed). PY must import the remora
package (scripts/lib/python.sh installs it into build/venv). Needs root, tc and tbf.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from rails import NS, down, up

# The receiving side: accepts one endpoint, receives 4 MiB messages (tag 1) until an
# empty one, checking the first and last bytes of each.
RECEIVER = r"""
import sys, numpy as np, remora
ctx = remora.Context()
lis = ctx.listen("0.0.0.0:" + sys.argv[1])
print("READY", flush=True)
ep = lis.accept(60.0)
buf = np.empty(4 << 20, np.uint8)
n = 0
while True:
    r = ep.recv(buf, 1)
    r.wait(120.0)
    if r.bytes == 0:
        break
    assert buf[0] == n % 251 and buf[-1] == (n + 7) % 251, "message %d damaged" % n
    n += 1
ep.close()
print("RECEIVED", n, flush=True)
"""

# The sending side: connects, sends for `before` seconds, sets its second rail down,
# sends for `after` seconds more; prints the completion times as JSON. With reset-all it
# resets every data stream instead (each rail's connections but the control stream's).
SENDER = r"""
import json, subprocess, sys, time, numpy as np, remora
address, before, after, how = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
ctx = remora.Context()
ep = ctx.connect(address, 30.0)
buf = np.empty(4 << 20, np.uint8)
times, n, down_at = [], 0, None
start = time.monotonic()
while True:
    now = time.monotonic()
    if down_at is None and now - start >= before:
        if how in ("down", "control-rail"):
            subprocess.run(["ip", "link", "set", "rra1" if how == "down" else "rra0", "down"], check=True)
        elif how in ("control", "everything"):
            host, _, port = ep.stats()["control_address"].rpartition(":")
            subprocess.run(["ss", "-K", "src", host, "and", "sport", "=", ":" + port], check=True,
                           stdout=subprocess.DEVNULL)
            if how == "everything":
                for rail in ep.stats()["rails"]:
                    if rail["streams"] > 0:
                        subprocess.run(["ss", "-K", "src", rail["local_address"]], check=True, stdout=subprocess.DEVNULL)
        else:
            st = ep.stats()
            port = st["control_address"].rpartition(":")[2]
            for rail in st["rails"]:
                if rail["streams"] > 0:
                    subprocess.run(["ss", "-K", "src", rail["local_address"], "and", "not", "sport", "=", ":" + port],
                                   check=True, stdout=subprocess.DEVNULL)
        down_at = time.monotonic()
    if down_at is not None and now - down_at >= after:
        break
    buf[0], buf[-1] = n % 251, (n + 7) % 251
    ep.send(buf, 1).wait(120.0)
    times.append(time.monotonic() - start)
    n += 1
ep.send(buf[:0], 1).wait(120.0)
st = ep.stats()
ep.close()
print(json.dumps({"times": times, "down_at": down_at - start, "message": len(buf),
                  "streams_retired": st["streams_retired"], "chunks_resent": st["chunks_resent"],
                  "streams_rejoined": st["streams_rejoined"], "control_resumed": st["control_resumed"]}), flush=True)
"""


def rate_between(times, size, t0, t1):
    """MB/s of the messages completed in [t0, t1)."""
    n = sum(1 for t in times if t0 <= t < t1)
    return n * size / (t1 - t0) / 1e6


def analyse(run):
    times, size, down_at = run["times"], run["message"], run["down_at"]
    end = times[-1]
    before = rate_between(times, size, 0.5, down_at)
    after = rate_between(times, size, end - 2.0, end)
    gaps = [b - a for a, b in zip(times, times[1:])]
    recovery = None
    t = down_at
    while t + 0.5 <= end:
        if rate_between(times, size, t, t + 0.5) >= 0.9 * after:
            recovery = t - down_at
            break
        t += 0.05
    return {"before_MBps": before, "after_MBps": after, "longest_gap_s": max(gaps),
            "recovery_s": recovery, "streams_retired": run["streams_retired"], "chunks_resent": run["chunks_resent"],
            "streams_rejoined": run.get("streams_rejoined", 0), "control_resumed": run.get("control_resumed", 0)}


def one_run(py, rate, peer_timeout_ms, before, after, port, how):
    up([rate, rate])
    env = dict(os.environ, REMORA_SAME_HOST="off", REMORA_STREAMS="1", REMORA_PEER_TIMEOUT_MS=str(peer_timeout_ms))
    try:
        recv = subprocess.Popen(["ip", "netns", "exec", NS[1], py, "-c", RECEIVER, str(port)],
                                env=dict(env, REMORA_RAILS="rrb"), stdout=subprocess.PIPE, text=True)
        if recv.stdout.readline().strip() != "READY":
            raise SystemExit("failover_time.py: the receiver did not start")
        sent = subprocess.run(["ip", "netns", "exec", NS[0], py, "-c", SENDER, f"10.232.0.2:{port}", str(before),
                               str(after), how], env=dict(env, REMORA_RAILS="rra"), capture_output=True, text=True,
                              timeout=before + after + 300)
        got = recv.communicate(timeout=60)[0]
        if sent.returncode != 0 or recv.returncode != 0:
            sys.stderr.write(sent.stdout + sent.stderr + got)
            raise SystemExit("failover_time.py: a run failed")
        return json.loads(sent.stdout.strip().splitlines()[-1])
    finally:
        down()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--peer-timeout-ms", type=int, default=1000)
    ap.add_argument("--break", dest="how", choices=["down", "control-rail", "reset-all", "control", "everything"], default="down")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", type=float, default=2.0)
    ap.add_argument("--after", type=float, default=6.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for i in range(a.runs):
        run = one_run(a.python, a.rate, a.peer_timeout_ms, a.before, a.after, 47400 + i, a.how)
        row = analyse(run)
        rows.append(row)
        rec = "never" if row["recovery_s"] is None else f"{row['recovery_s']:.2f} s"
        print(f"run {i}: before {row['before_MBps']:7.1f} MB/s, after {row['after_MBps']:7.1f} MB/s, longest gap "
              f"{row['longest_gap_s']:.2f} s, recovery {rec}, {row['streams_retired']} stream(s) retired, "
              f"{row['chunks_resent']} chunk(s) resent, {row['streams_rejoined']} rejoined, "
              f"control resumed {row['control_resumed']}", flush=True)
    recoveries = [r["recovery_s"] for r in rows if r["recovery_s"] is not None]
    median = statistics.median(recoveries) if recoveries else None
    what = {"down": "link down -> one-rail rate",
            "control-rail": "the control stream's rail's link down -> one-rail rate", "reset-all": "every data stream reset -> the rate after",
            "control": "the control stream reset -> the rate after",
            "everything": "every connection reset -> the rate after"}[a.how]
    print(f"# {what} (tbf {a.rate} each, REMORA_PEER_TIMEOUT_MS={a.peer_timeout_ms}), median of "
          f"{len(recoveries)} of {a.runs} runs: " + ("never" if median is None else f"{median:.2f} s"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"break": a.how, "rate": a.rate, "peer_timeout_ms": a.peer_timeout_ms, "runs": rows, "median_recovery_s": median},
                      f, indent=1)


if __name__ == "__main__":
    main()
