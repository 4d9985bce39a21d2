#!/usr/bin/env python3
"""Sample a running timelined's /metrics and plot what can hold a delivery
up, on one time axis: lateness, write+fsync durations, the writer's queue,
RocksDB's memtables, L0 files, flushes, compactions and write stalls, and
the bytes the machine's disks wrote (/proc/diskstats).

  tools/stallplot.py [--url http://127.0.0.1:7401/metrics] [--every 0.1]
                     [--secs 30] [--out stall]

Writes OUT.tsv (one row per interval) and, when gnuplot is there, OUT.png.
Run it beside a load (tl-bench with --timelined tools/timelined-metrics.sh,
or any client); it stops after --secs or at the first failed scrape after
one succeeded (the broker went away).
"""
import argparse
import shutil
import subprocess
import sys
import time
import urllib.request


def scrape(url):
    """The samples of one scrape: {(name, labels): value}."""
    out = {}
    with urllib.request.urlopen(url, timeout=2) as r:
        for line in r.read().decode().splitlines():
            if not line or line[0] == "#":
                continue
            key, _, val = line.rpartition(" ")
            name, _, labels = key.partition("{")
            try:
                out[(name, labels.rstrip("}"))] = float(val)
            except ValueError:
                pass
    return out


def buckets(s, name):
    """A histogram's cumulative buckets, [(le, count)] by le."""
    rows = []
    for (n, labels), v in s.items():
        if n == name + "_bucket" and labels.startswith('le="'):
            le = labels[4:-1]
            rows.append((float("inf") if le == "+Inf" else float(le), v))
    return sorted(rows)


def quantile(prev, cur, name, q):
    """The q-quantile's bucket bound of what a histogram gained between two
    scrapes (0 when nothing was added; the last finite bound past it)."""
    a, b = buckets(prev, name), buckets(cur, name)
    if not b:
        return 0.0
    pa = dict(a)
    delta = [(le, c - pa.get(le, 0)) for le, c in b]
    total = delta[-1][1]
    if total <= 0:
        return 0.0
    finite = [le for le, _ in b if le != float("inf")]
    for le, c in delta:
        if c >= q * total:
            return le if le != float("inf") else finite[-1] * 2
    return finite[-1] * 2


def gauge(s, name):
    return sum(v for (n, _), v in s.items() if n == name)


COLS = ["t", "delivered", "late_p50", "late_p99", "late_max", "sync_p99",
        "sync_max", "queued", "imm_memtables", "l0_files", "flushes",
        "compactions", "write_stopped", "delayed_rate", "disk_mb_s"]


def disk_sectors():
    """Sectors written so far by the machine's disks (not partitions,
    loop or ram devices), from /proc/diskstats."""
    try:
        import os
        disks = {d for d in os.listdir("/sys/block")
                 if not d.startswith(("loop", "ram"))}
        total = 0
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if len(p) > 9 and p[2] in disks:
                    total += int(p[9])
        return total
    except OSError:
        return 0


def row(t, prev, cur, dt, sectors):
    return [
        t,
        (gauge(cur, "timeline_delivered_total") -
         gauge(prev, "timeline_delivered_total")) / dt,
        quantile(prev, cur, "timeline_lateness_ms", 0.5),
        quantile(prev, cur, "timeline_lateness_ms", 0.99),
        quantile(prev, cur, "timeline_lateness_ms", 1.0),
        quantile(prev, cur, "timeline_commit_sync_ms", 0.99),
        quantile(prev, cur, "timeline_commit_sync_ms", 1.0),
        gauge(cur, "timeline_commit_queued_ops"),
        gauge(cur, "timeline_rocksdb_immutable_memtables"),
        gauge(cur, "timeline_rocksdb_l0_files"),
        gauge(cur, "timeline_rocksdb_running_flushes"),
        gauge(cur, "timeline_rocksdb_running_compactions"),
        gauge(cur, "timeline_rocksdb_write_stopped"),
        gauge(cur, "timeline_rocksdb_delayed_write_rate") / 1e6,
        sectors * 512 / 1e6 / dt,
    ]


PLOT = """
set terminal pngcairo size 1200,1100 font ",9"
set output "{out}.png"
set multiplot layout 4,1 title "{title}"
set xlabel "seconds"
set key top left
set grid
set logscale y
set ylabel "ms"
plot "{out}.tsv" u 1:($5>0?$5:1/0) w steps lw 2 dt 2 t "lateness max (bucket)", \\
     "" u 1:($4>0?$4:1/0) w steps t "lateness p99", \\
     "" u 1:($7>0?$7:1/0) w steps lw 2 dt 3 t "write+fsync max", \\
     "" u 1:($6>0?$6:1/0) w steps t "write+fsync p99"
unset logscale y
set ylabel "per second"
set y2label "MB/s"
set y2tics
plot "{out}.tsv" u 1:2 w steps t "delivered/s", \\
     "" u 1:15 axes x1y2 w steps t "disk writes, MB/s (right)"
unset y2tics
unset y2label
set ylabel "count"
plot "{out}.tsv" u 1:8 w steps t "ops queued for the writer"
plot "{out}.tsv" u 1:9 w steps t "immutable memtables", \\
     "" u 1:10 w steps t "L0 files", \\
     "" u 1:11 w steps t "flushes running", \\
     "" u 1:12 w steps t "compactions running", \\
     "" u 1:($13*5) w steps lw 2 t "write stopped (x5)", \\
     "" u 1:($14>0?1:0) w steps t "writes delayed"
unset multiplot
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:7401/metrics")
    ap.add_argument("--every", type=float, default=0.1)
    ap.add_argument("--secs", type=float, default=30)
    ap.add_argument("--wait", type=float, default=30,
                    help="seconds to wait for the first scrape")
    ap.add_argument("--out", default="stall")
    a = ap.parse_args()

    t0 = time.monotonic()
    prev = None
    while prev is None:
        try:
            prev = scrape(a.url)
        except OSError:
            if time.monotonic() - t0 > a.wait:
                sys.exit("no metrics at %s" % a.url)
            time.sleep(0.05)
    start = time.monotonic()
    sect = disk_sectors()
    rows = []
    tprev = start
    while time.monotonic() - start < a.secs:
        time.sleep(a.every)
        try:
            cur = scrape(a.url)
        except OSError:
            break
        now = time.monotonic()
        s2 = disk_sectors()
        rows.append(row(now - start, prev, cur, max(now - tprev, 1e-6),
                        s2 - sect))
        sect = s2
        prev, tprev = cur, now
    with open(a.out + ".tsv", "w") as f:
        f.write("# " + "\t".join(COLS) + "\n")
        for r in rows:
            f.write("\t".join("%.4g" % v for v in r) + "\n")
    print("%d intervals -> %s.tsv" % (len(rows), a.out))
    if rows and shutil.which("gnuplot"):
        worst = max(r[4] for r in rows)
        title = "timelined: lateness and the store (worst lateness bucket %g ms)" % worst
        subprocess.run(["gnuplot"], input=PLOT.format(out=a.out, title=title),
                       text=True, check=False)
        print("plot -> %s.png" % a.out)


if __name__ == "__main__":
    main()
