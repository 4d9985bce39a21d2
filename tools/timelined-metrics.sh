#!/bin/sh
# timelined with its metrics endpoint on, whatever the caller asked: for
# benchmarks that start the broker with --metrics off (tl-bench
# --timelined tools/timelined-metrics.sh), so tools/stallplot.py can watch
# it. TL_METRICS (default 127.0.0.1:7401) picks the address.
dir=$(dirname "$0")
bin=${TIMELINED:-$dir/../build-rel/broker/timelined}
args=""
skip=0
for a in "$@"; do
	if [ "$skip" = 1 ]; then
		skip=0
		continue
	fi
	if [ "$a" = "--metrics" ]; then
		skip=1
		continue
	fi
	args="$args $(printf '%s' "$a" | sed "s/'/'\\\\''/g; s/^/'/; s/\$/'/")"
done
eval exec "\"$bin\"" "$args" --metrics "${TL_METRICS:-127.0.0.1:7401}"
