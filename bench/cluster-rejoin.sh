#!/usr/bin/env bash
# A wiped follower rejoins a filled cluster: how long until it has caught
# up, and how much memory it took. Fills a three-node cluster with
# `tl-bench ... produce --keep` (snapshots every 64 entries, so the Raft log
# before the newest one is gone), starts the three nodes again from the kept
# directory, SIGKILLs a follower, deletes its data directory, starts it, and
# polls until its applied index reaches the leader's commit index at the
# start (or LIMIT seconds pass). Prints the time, the follower's peak RSS
# (VmHWM), the leader's, and the sizes on disk.
#
#   bench/cluster-rejoin.sh [MESSAGES] [BODY] [TIMELINED] [LIMIT]
#
# MESSAGES (300000) of BODY bytes (1000), TIMELINED the broker
# (build-rel/broker/timelined), LIMIT seconds (300); TL_BENCH the tl-bench
# that fills (build-rel/bench/tl-bench). Needs curl.
set -u
n=${1:-300000}
body=${2:-1000}
bin=$(realpath "${3:-build-rel/broker/timelined}")
limit=${4:-300}
bench=$(realpath "${TL_BENCH:-build-rel/bench/tl-bench}")
[ -x "$bench" ] || { echo "cluster-rejoin: $bench not found" >&2; exit 2; }
work=$(mktemp -d /tmp/cluster-rejoin.XXXXXX)
wrap=$work/timelined.sh
printf '#!/bin/sh\nexec %s --cluster-snapshot-entries 64 "$@"\n' "$bin" >"$wrap"
chmod +x "$wrap"
cleanup() {
	pkill -9 -f "$work/.*/node[123].conf" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

"$bench" --systems timeline-cluster3 --timelined "$wrap" --produce-n "$n" \
	--body "$body" --keep --dir "$work" produce | grep 'produce:'
run=$(ls -d "$work"/tl-bench-*)
cd "$run" || exit 2
metric() { # node name
	curl -s -m 1 "http://$(awk '/^metrics/ {print $3}' node$1.conf)/metrics" |
		awk -v k="$2" '$1 == k {print $2}'
}
pid_of() { pgrep -f "$wrap -c $run/node$1.conf|$bin --cluster-snapshot-entries 64 -c $run/node$1.conf" | head -1; }
start() { (setsid "$wrap" -c "$run/node$1.conf" >>"node$1.log" 2>&1 &); }
for i in 1 2 3; do start $i; done
leader=0
for _ in $(seq 1 300); do
	l=$(metric 1 timeline_cluster_leader_id)
	if [ -n "$l" ] && [ "$l" != 0 ]; then leader=$l; break; fi
	sleep 0.2
done
[ "$leader" != 0 ] || { echo "cluster-rejoin: no leader" >&2; exit 1; }
f=$((leader % 3 + 1))
echo "leader node $leader; the store $(du -sh "data/node$leader/store" | cut -f1)," \
	"Raft log $(du -sh "data/node$leader/raft" | cut -f1)," \
	"snapshots $(du -sh "data/node$leader/snapshots" 2>/dev/null | cut -f1)"
target=$(metric "$leader" timeline_cluster_commit_index)
kill -9 "$(pid_of $f)"
sleep 0.5
rm -rf "data/node$f"
t0=$(date +%s.%N)
start $f
peak=0 applied=0
while :; do
	p=$(pid_of $f)
	h=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null)
	[ -n "$h" ] && peak=$h
	applied=$(metric $f timeline_cluster_applied_index)
	[ -n "$applied" ] && [ "$applied" -ge "$target" ] && break
	if [ "$(echo "$(date +%s.%N) - $t0 > $limit" | bc)" = 1 ]; then
		echo "not caught up after $limit s (applied ${applied:-?} of $target)"
		break
	fi
	sleep 0.1
done
t1=$(date +%s.%N)
echo "follower node $f: applied ${applied:-?} of $target after" \
	"$(echo "$t1 - $t0" | bc) s; peak RSS $((peak / 1024)) MB;" \
	"leader's peak RSS $(($(awk '/VmHWM/ {print $2}' "/proc/$(pid_of "$leader")/status") / 1024)) MB"
grep -h 'R005 snapshot installed' "node$f.log" | tail -1
