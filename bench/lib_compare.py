"""bench/lib_compare.py — the table side of bench/compare_*.sh (see bench/lib_compare.sh):
reads the reference tools' and remora's outputs from the run directory, pairs them per
round, and prints the medians, the median per-round ratios against their targets and
the per-round ratios; writes the JSON.

Exit codes (Comparison.finish): 0 every target met, 3 a target missed, 4 a remora run
failed; a reference that cannot be parsed ends the script (SystemExit with the reason).
"""
import json
import os
import re
import statistics
import sys

median = lambda xs: statistics.median(xs) if xs else None


def size_bytes(size):
    """Bytes of a size as remora writes it: 8, 4K, 1M, 2G (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = size.strip().upper()
    return int(s[:-1]) * units[s[-1]] if s[-1:] in units else int(s)


def size_label(size):
    """How a table row names a size: "8 B" for a plain number, "4K" as written."""
    return f"{size} B" if size.isdigit() else size


class Comparison:
    @classmethod
    def from_argv(cls, metrics):
        """The compare scripts' embedded Python gets: run dir, streams, seconds per
        reference run, rounds, JSON path, bandwidth window, the bandwidth sizes and the
        latency sizes (comma-separated, as given to --bw-sizes and --lat-sizes). Loads
        every round."""
        tmp, streams, per, repeat, json_out, window = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                        int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
        c = cls(tmp, repeat, per)
        c.bw_sizes = [x for x in sys.argv[7].split(",") if x]
        c.lat_sizes = [x for x in sys.argv[8].split(",") if x]
        c.streams, c.json_out, c.window = streams, json_out, window
        c.runs = c.remora_runs(metrics)
        c.ref_bw = {r: {len_: c.iperf(len_, r) for len_ in c.bw_sizes} for r in c.rounds}
        c.ref_lat = {r: {size: c.sockperf(size, r) for size in c.lat_sizes} for r in c.rounds}
        return c

    def report(self, tool, title, extra_fields=()):
        """Prints the table (titled with remora's configuration) and writes the JSON;
        returns the exit code."""
        cfg = next((run["config"] for r in self.rounds for run in self.runs[r].values() if run), {})
        self.print_table(f"# {title} on loopback: {cfg.get('streams', self.streams)} data streams, "
                         f"chunk {cfg.get('chunk_bytes', '?')} B, eager limit {cfg.get('eager_limit', '?')} B, "
                         f"spin {cfg.get('spin_us', '?')} us, "
                         + "".join(f"{label} {cfg.get(key, '?')}, " for label, key in extra_fields) +
                         f"bw window {self.window}")
        return self.finish(self.json_out, {
            "tool": tool, "streams": self.streams, "repeat": self.repeat, "reference_seconds": self.per,
            "window": self.window, "bw_sizes": self.bw_sizes, "lat_sizes": self.lat_sizes,
            "iperf3_l": {k: self.iperf_len(k) for k in self.bw_sizes},
            "sockperf_message_bytes": {k: max(14, size_bytes(k)) for k in self.lat_sizes},
            "rounds": [{"round": r, "first": self.first[r],
                        "iperf3": {k: {"MBps": v[0], "l": self.iperf_len(k), "end": v[1]["end"]}
                                   for k, v in self.ref_bw[r].items()},
                        "sockperf_one_way_us": self.ref_lat[r], "remora": self.runs[r]} for r in self.rounds]})

    def __init__(self, tmp, repeat, per):
        self.tmp = tmp
        self.repeat = repeat
        self.per = per  # seconds per reference run
        self.rounds = range(1, repeat + 1)
        self.first = {r: open(f"{tmp}/first-r{r}").read().strip() for r in self.rounds}
        self.rows = []
        self.errors = {}

    def iperf_len(self, len_):
        """The -l iperf3 ran with for the row of len_: len_, or remora's chunk size where
        iperf3 refused len_ (3.12 refuses blocks over 1 MiB; bench/lib_compare.sh)."""
        path = f"{self.tmp}/iperf3-l-{len_}"
        return open(path).read().strip() if os.path.exists(path) else len_

    def iperf(self, len_, r):
        """(MB/s (10^6 bytes, as OSU), the whole iperf3 JSON) of round r."""
        j = json.load(open(f"{self.tmp}/iperf3-{len_}-r{r}.json"))
        if "error" in j:
            raise SystemExit(f"iperf3 -l {len_} (round {r}): {j['error']}")
        return j["end"]["sum_received"]["bits_per_second"] / 8 / 1e6, j

    def sockperf(self, size, r):
        """sockperf's one-way latency (RTT/2) at the latency size `size` in round r: avg,
        p50, p99 in us."""
        text = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{self.tmp}/sockperf-{size}-r{r}.log").read())
        avg = re.search(r"avg-latency=([0-9.]+)", text)
        if not avg:
            raise SystemExit(f"could not find avg-latency in sockperf's output ({size}, round {r}):\n" + text[-1000:])
        pct = {float(p): float(v) for p, v in re.findall(r"percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", text)}
        return {"avg": float(avg.group(1)), "p50": pct.get(50.0), "p99": pct.get(99.0)}

    def remora_runs(self, metrics):
        """{round: {metric: remora's JSON, or None when that run failed}}; failures are
        kept in self.errors with their message."""
        runs = {}
        for r in self.rounds:
            runs[r] = {}
            for m in metrics:
                path = f"{self.tmp}/remora-{m}-r{r}.json"
                runs[r][m] = json.load(open(path)) if os.path.exists(path) else None
                if runs[r][m] is None:
                    err = f"{self.tmp}/remora-{m}-r{r}.err"
                    self.errors[f"{m} round {r}"] = open(err).read().strip() if os.path.exists(err) else None
        return runs

    def row(self, metric, reference, refs, mines, target, **what):
        """refs, mines: per round (mine None where remora failed); target: (">=" or
        "<=", value) or None; `what` describes the row for programs (bench/plot.py):
        quantity ("bandwidth_MBps" or "latency_us"), size (the bytes of remora's
        messages), series (remora's operation: "p2p", "put", "get"), stat (latency's
        "avg", "p50", "p99") and reference_kind ("iperf3", "sockperf one-way",
        "sockperf RTT")."""
        per_round = []
        for r, ref, mine in zip(self.rounds, refs, mines):
            ratio = mine / ref if ref and mine is not None else None
            per_round.append({"round": r, "first": self.first[r], "reference_value": ref, "remora": mine,
                              "ratio": ratio})
        ratios = [x["ratio"] for x in per_round if x["ratio"] is not None]
        ratio = median(ratios)
        met = None
        if ratio is not None and target:
            met = ratio >= target[1] if target[0] == ">=" else ratio <= target[1]
        failed = sum(m is None for m in mines)
        self.rows.append({"metric": metric, **what, "reference": reference,
                          "reference_value": median([v for v in refs if v is not None]),
                          "remora": median([v for v in mines if v is not None]),
                          "ratio": ratio, "target": f"{target[0]} {target[1]}" if target else None, "met": met,
                          "failed": failed == len(mines), "failed_rounds": failed, "rounds": per_round})

    def print_table(self, title):
        repeat = self.repeat
        print(title)
        print(f"# {repeat} round{'s' if repeat != 1 else ''}, reference runs {self.per} s each; per metric the reference "
              f"and remora ran back to back, reference first in odd rounds, remora first in even ones")
        print("# ref, remora: medians over the rounds; ratio: median of the per-round ratios (checked against the target)")
        mw = max([30] + [len(r["metric"]) for r in self.rows])
        rw = max([28] + [len(r["reference"]) for r in self.rows])
        print(f"{'metric':<{mw}} {'reference':<{rw}} {'ref':>10} {'remora':>10} {'ratio':>7}  {'target':<7} {'':4}")
        fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
        for r in self.rows:
            ratio = f"{r['ratio']:7.3f}" if r["ratio"] is not None else f"{'-':>7}"
            verdict = "FAILED" if r["failed"] else "" if r["met"] is None else ("met" if r["met"] else "MISS")
            if r["failed_rounds"] and not r["failed"]:
                verdict += f" ({r['failed_rounds']}/{repeat} rounds FAILED)"
            print(f"{r['metric']:<{mw}} {r['reference']:<{rw}} {fmt(r['reference_value'])} {fmt(r['remora'])} {ratio}  "
                  f"{r['target'] or '-':<7} {verdict}".rstrip())
        print("# per-round ratios (round: R = reference ran first, r = remora ran first)")
        for r in self.rows:
            cells = "  ".join(f"{x['round']}{'R' if x['first'] == 'reference' else 'r'} "
                              + (f"{x['ratio']:.3f}" if x["ratio"] is not None else "FAILED") for x in r["rounds"])
            print(f"{r['metric']:<{mw}} {cells}")

    def finish(self, json_out, out):
        """Writes `out` plus rows and errors to json_out (if given), prints the failed
        runs; returns the exit code."""
        if json_out:
            out = dict(out, rows=self.rows, remora_errors=self.errors)
            with open(json_out, "w") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
        for name, err in self.errors.items():
            print(f"# remora {name} FAILED: {err}")
        if self.errors:
            return 4
        return 3 if any(r["met"] is False for r in self.rows) else 0
