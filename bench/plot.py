#!/usr/bin/env python3
"""bench/plot.py — draws bandwidth and latency against message size from the JSON that
remora's benchmarks write, remora beside the reference measured in the same run.

  bench/plot.py FILE.json [FILE.json ...] -o OUT.png [--title TEXT] [--stat avg|p50|p99]

What it reads (each file's "tool" field says which it is):
  bench/compare_p2p.sh --json, bench/compare_rma.sh --json
      remora's medians over the rounds beside iperf3 (bandwidth) and sockperf
      (latency) at every size of --bw-sizes and --lat-sizes, the spread of the rounds
      as error bars: the picture this script is for.
  remora bench p2p --json, remora bench rma --json
      one curve per file: bandwidth (bw, bibw, put_bw, get_bw, put_rate) or latency
      (lat, put_lat, get_lat, notify_lat, atomic_lat) against size.
  remora bench coll --json
      bus bandwidth (out of place) and time per operation of each collective, beside
      the point-to-point reference measured in the same run.
  remora demo --json
      the demo's bandwidth and latency.

Left panel: bandwidth in GB/s (10^9 bytes/s). Right panel: latency in microseconds,
log scale (`--stat` picks the average, p50 or p99 where a file has them). remora's
curves are solid and coloured, references dashed and grey. The footer names remora's
version and transport settings, and whether chunks went over TCP or by same-host
pulls. It prints one line per curve drawn (its label and points) and exits 1, saying
why, on a file it cannot read.

Needs matplotlib (scripts/test.sh installs it into build/venv: build/venv/bin/python
bench/plot.py ...).
"""
import argparse
import json
import os
import sys
import textwrap

BW = "bandwidth"
LAT = "latency"


class Curve:
    """One line of the picture: points (size in bytes, value, low, high) of one panel."""

    def __init__(self, panel, label, reference=False, group=None):
        """group: curves of one group (remora's operation, or one file) share a colour in
        both panels."""
        self.panel, self.label, self.reference, self.group = panel, label, reference, group or label
        self.points = []

    def add(self, size, value, low=None, high=None):
        if value is not None:
            self.points.append((size, value, value if low is None else low, value if high is None else high))


def size_text(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def pulled(run):
    """Whether a remora JSON's driver side read chunks by same-host pulls."""
    endpoint = (run or {}).get("local", {}).get("endpoint", {})
    return endpoint.get("chunks_pulled", 0) > 0


def settings(run):
    cfg = (run or {}).get("config", {})
    parts = [f"remora {run.get('version', '?')}"] if run else []
    if "streams" in cfg:
        parts.append(f"{cfg['streams']} data streams")
    if "chunk_bytes" in cfg:
        parts.append(f"chunk {size_text(cfg['chunk_bytes'])}")
    if run and "local" in run:
        parts.append("same-host pulls" if pulled(run) else "TCP (loopback)")
    return ", ".join(parts)


def from_compare(doc, stat):
    """bench/compare_*.sh: remora and its references, per row kind."""
    rows = doc.get("rows", [])
    if rows and "quantity" not in rows[0]:
        raise ValueError("its rows do not say what they measure (made by a compare script older than bench/plot.py: "
                         "run it again)")
    curves = {}
    for row in rows:
        if row["quantity"] == "latency_us" and row.get("stat") != stat:
            continue
        panel = BW if row["quantity"] == "bandwidth_MBps" else LAT
        scale = 1e-3 if panel == BW else 1.0  # MB/s to GB/s
        rounds = row.get("rounds", [])
        mine = [x["remora"] for x in rounds if x.get("remora") is not None]
        refs = [x["reference_value"] for x in rounds if x.get("reference_value") is not None]
        what = "bandwidth" if panel == BW else f"latency ({stat})"
        key = ("remora", panel, row["series"])
        curve = curves.setdefault(key, Curve(panel, f"remora {row['series']} {what}", group=row["series"]))
        if row.get("remora") is not None:
            curve.add(row["size"], row["remora"] * scale, min(mine) * scale, max(mine) * scale)
        kind = row.get("reference_kind", "reference")
        ref_label = {"iperf3": "iperf3 (-l size; remora's chunk above 1M)",
                     "sockperf one-way": f"sockperf one-way ({stat})",
                     "sockperf RTT": f"sockperf round trip ({stat})"}.get(kind, kind)
        ref = curves.setdefault(("reference", panel, kind), Curve(panel, ref_label, reference=True))
        if row.get("reference_value") is not None and row["size"] not in [p[0] for p in ref.points]:
            ref.add(row["size"], row["reference_value"] * scale, min(refs) * scale, max(refs) * scale)
    first = next((run for rnd in doc.get("rounds", []) for run in rnd.get("remora", {}).values() if run), None)
    note = settings(first) + f"; {doc.get('repeat', '?')} rounds, error bars: their spread"
    return list(curves.values()), note


def from_bench(doc, stat, name):
    """remora bench p2p / rma: one curve."""
    mode = doc.get("mode", "")
    sub = doc["tool"].split()[-1]
    lat = mode in ("lat", "put_lat", "get_lat", "notify_lat", "atomic_lat")
    curve = Curve(LAT if lat else BW, f"remora {sub} {mode}" + (f" ({stat})" if lat else "") + f" [{name}]",
                  group=name)
    for row in doc.get("results", []):
        if lat:
            curve.add(row["size"], row["latency_us"][stat])
        else:
            curve.add(row["size"], row["bandwidth_MBps"] * 1e-3)
    return [curve], settings(doc)


def from_coll(doc, name):
    """remora bench coll: bus bandwidth and time per collective, and the p2p reference."""
    curves = {}
    for row in doc.get("results", []):
        oop = row.get("out_of_place") or row.get("in_place")
        if not oop or row["size"] == 0:
            continue
        op = row["op"]
        ranks = doc.get("ranks", "?")
        curves.setdefault((BW, op), Curve(BW, f"remora {op} busbw, {ranks} ranks", group=name + op)).add(
            row["size"], oop["busbw_GBps"])
        curves.setdefault((LAT, op), Curve(LAT, f"remora {op} time, {ranks} ranks", group=name + op)).add(
            row["size"], oop["time_us"])
    ref = doc.get("reference") or {}
    exchange = Curve(BW, "reference: p2p exchange, per direction", reference=True)
    for x in ref.get("exchange", []):
        exchange.add(x["size"], x["bandwidth_GBps_per_direction"])
    pingpong = Curve(LAT, "reference: p2p round trip (avg)", reference=True)
    if ref.get("pingpong"):
        pingpong.add(ref["pingpong"]["size"], ref["pingpong"]["rtt_us"]["avg"])
    cfg = doc.get("config", {})
    note = f"remora {doc.get('version', '?')}, {cfg.get('streams', '?')} data streams [{name}]"
    return list(curves.values()) + [exchange, pingpong], note


def from_demo(doc, name):
    bw = Curve(BW, f"remora demo bandwidth [{name}]", group=name)
    lat = Curve(LAT, f"remora demo latency [{name}]", group=name)
    for row in doc.get("results", []):
        bw.add(row["size"], row["bandwidth_GBps"])
        lat.add(row["size"], row["latency_us"])
    return [bw, lat], settings(doc)


def load(path, stat):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read it: {e}") from None
    tool = doc.get("tool", "") if isinstance(doc, dict) else ""
    name = os.path.basename(path)
    try:
        if tool.startswith("bench/compare_"):
            return from_compare(doc, stat)
        if tool in ("remora bench p2p", "remora bench rma"):
            return from_bench(doc, stat, name)
        if tool == "remora bench coll":
            return from_coll(doc, name)
        if tool == "remora demo":
            return from_demo(doc, name)
    except (KeyError, TypeError) as e:
        raise ValueError(f"a {tool} JSON without the field {e}") from None
    raise ValueError(f"not a benchmark JSON this script knows (tool: {tool or 'none'}); see --help")


def draw(curves, notes, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    groups = list(dict.fromkeys(c.group for c in curves if not c.reference))
    colour = {g: palette[i % len(palette)] for i, g in enumerate(groups)}
    ref_styles = [("#555555", "s"), ("#999999", "^"), ("#333333", "D"), ("#777777", "v")]
    references = list(dict.fromkeys(c.group for c in curves if c.reference))
    ref_style = {g: ref_styles[i % len(ref_styles)] for i, g in enumerate(references)}
    for ax, panel in zip(axes, (BW, LAT)):
        mine = [c for c in curves if c.panel == panel and c.points]
        for c in mine:
            pts = sorted(c.points)
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            if c.reference:
                grey, marker = ref_style[c.group]
                ax.errorbar(xs, ys, yerr=err, color=grey, marker=marker, linestyle="--", capsize=3, label=c.label)
            else:
                ax.errorbar(xs, ys, yerr=err, color=colour[c.group], marker="o", linestyle="-", capsize=3,
                            label=c.label)
        ax.set_xscale("log", base=2)
        sizes = sorted({p[0] for c in mine for p in c.points})
        if sizes:
            ax.xaxis.set_major_locator(FixedLocator(sizes))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_text(int(round(v)))))
        ax.set_xlabel("message size (bytes)")
        if panel == BW:
            ax.set_ylabel("bandwidth (GB/s)")
            ax.set_ylim(bottom=0)
            ax.set_title("bandwidth (higher is better)")
        else:
            ax.set_ylabel("latency (µs)")
            ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.set_title("latency (lower is better)")
        ax.grid(True, which="both", alpha=0.3)
        if mine:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "nothing measured", ha="center", va="center", transform=ax.transAxes)
    if title:
        fig.suptitle(title)
    footer = textwrap.wrap("; ".join(dict.fromkeys(n for n in notes if n)), 170)
    fig.text(0.01, 0.01, "\n".join(footer), fontsize=7, color="#444444")
    fig.tight_layout(rect=(0, 0.025 + 0.025 * len(footer), 1, 1))
    fig.savefig(out)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("inputs", nargs="+", metavar="FILE.json")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.png")
    ap.add_argument("--title", default="")
    ap.add_argument("--stat", choices=("avg", "p50", "p99"), default="avg", help="which latency (default avg)")
    a = ap.parse_args()
    curves, notes = [], []
    for path in a.inputs:
        try:
            got, note = load(path, a.stat)
        except ValueError as e:
            print(f"plot.py: {path}: {e}", file=sys.stderr)
            return 1
        curves += got
        notes.append(note)
    drawn = [c for c in curves if c.points]
    if not drawn:
        print("plot.py: nothing to draw: the files hold no measured sizes", file=sys.stderr)
        return 1
    try:
        draw(drawn, notes, a.output, a.title)
    except OSError as e:
        print(f"plot.py: cannot write {a.output}: {e}", file=sys.stderr)
        return 1
    for c in drawn:
        pts = sorted(c.points)
        print(f"{c.panel:9} {c.label}: {len(pts)} points, {size_text(pts[0][0])} .. {size_text(pts[-1][0])}")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
