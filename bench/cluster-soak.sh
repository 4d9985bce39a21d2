#!/usr/bin/env bash
# The cluster soak: the kill-rounds test (tests/cluster/test_killrounds.c)
# with hundreds of leader kills instead of twenty, repeated. Each run starts
# three real timelined processes on loopback, streams creates through the
# SDK while two consumers lease, extend and delete, SIGKILLs the leader at a
# random moment ROUNDS times (restarting it each time), then checks that
# every acknowledged create was delivered, none early, none to a second
# consumer under a valid lease, none back after its delete, and that every
# node's store is consistent and equal to the others.
#
#   bench/cluster-soak.sh [ROUNDS] [RUNS] [BUILD_DIR]
#
# ROUNDS leader kills per run (200), RUNS runs (3), BUILD_DIR the build with
# the tests (build). Prints one line per run and exits 1 if any run failed.
set -u
rounds=${1:-200}
runs=${2:-3}
build=${3:-build}
bin="$build/tests/cluster_test_killrounds"
if [ ! -x "$bin" ]; then
	echo "cluster-soak: $bin not found (build the tests first)" >&2
	exit 2
fi
failed=0
for run in $(seq 1 "$runs"); do
	start=$SECONDS
	log=$(mktemp /tmp/cluster-soak.XXXXXX)
	# Criterion's own per-test timeout is off by default; ctest's 900 s
	# does not apply here.
	if TL_KILL_ROUNDS=$rounds "$bin" --verbose >"$log" 2>&1; then
		status=pass
	else
		status=FAIL
		failed=1
	fi
	made=$(grep -o '[0-9]* acknowledged creates[^)]*' "$log" | head -1)
	printf 'run %d: %d leader kills, %s in %d s%s\n' "$run" "$rounds" \
	    "$status" $((SECONDS - start)) "${made:+ ($made)}"
	if [ "$status" = FAIL ]; then
		echo "  log kept: $log"
	else
		rm -f "$log"
	fi
done
exit $failed
