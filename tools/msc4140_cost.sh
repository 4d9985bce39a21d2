#!/bin/sh
# The MSC4140 gateway's cost per scheduled event (docs/msc4140.md,
# PERFORMANCE): tl-msc4140-bench --events at two sizes, RUNS runs each,
# alternating, with the load average before each run; then the medians.
# usage: tools/msc4140_cost.sh [BUILD_DIR] [RUNS] [SMALL] [LARGE]
set -eu
build=${1:-build-rel}
runs=${2:-3}
small=${3:-10000}
large=${4:-100000}
bench="$build/bench/tl-msc4140-bench"
out=$(mktemp -d /tmp/msc4140-cost-XXXXXX)
for r in $(seq 1 "$runs"); do
	for n in "$small" "$large"; do
		f="$out/$n.$r"
		{ echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
		  "$bench" --connections 16 --events "$n"; } >"$f" 2>&1 || true
		echo "== $n events, run $r"; cat "$f"
	done
done
# medians of the per-event figures
for n in "$small" "$large"; do
	cat "$out/$n".* | awk -v n="$n" '
	function median(a, k,   i, j, t) {
		for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
			if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	/^load:/ { load = load " " $2 }
	/^scheduled/ { for (i = 1; i <= NF; i++) if ($i == "=") rate[++nr] = $(i + 1) + 0 }
	/CPU while scheduling/ { for (i = 1; i <= NF; i++) if ($i == "us") cpu[++nc] = $(i - 1) + 0 }
	/^  before / { rss0[++nb] = $3 }
	/^  after all / { rss1[++na] = $4; hwm1[na] = $7 }
	/memory growth/ { grow[++ng] = $4 + 0 }
	/^  restarted, 3 s later/ { rssr[++nr2] = $6 }
	/^  disk after the stop/ { gsub(/[()+]/, "", $0); split($0, f); stopb[++ns] = f[12] + 0 }
	END {
		printf "%d events: load %s\n", n, load
		printf "  schedules/s %.0f, CPU %.0f us/event, VmRSS before %.1f MiB, after %.1f MiB (%+.0f bytes/event), VmHWM %.1f MiB\n",
		    median(rate, nr), median(cpu, nc), median(rss0, nb), median(rss1, na), median(grow, ng), median(hwm1, na)
		printf "  files after a clean stop %.0f bytes/event, VmRSS restarted %.1f MiB\n",
		    median(stopb, ns), median(rssr, nr2)
	}'
done
echo "outputs in $out"
