#!/usr/bin/env bash
# Builds the libFuzzer targets (a clang build with TL_FUZZ=ON, only the
# target `fuzz`) and runs each over a copy of its seed corpus for a fixed
# time. Fails on a crash, a leak, a sanitizer report, a hang, a broken
# property, or committed seeds that are not what fuzz_seeds writes now.
#
#   tests/fuzz/run.sh [--build DIR] [--time SECONDS] [TARGET...]
#   tests/fuzz/run.sh --seeds    rewrite tests/fuzz/corpus/ (then commit)
#
# TARGET: frame request reply gateway (all by default). The ctest entry
# fuzz_short runs it with its defaults: DIR build/fuzz, 15 s per target.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
corpus=$src/tests/fuzz/corpus
dir=$src/build-fuzz
secs=15
seeds=0
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) dir=$2; shift 2 ;;
    --time) secs=$2; shift 2 ;;
    --seeds) seeds=1; shift ;;
    -*) echo "usage: $0 [--build DIR] [--time SECONDS] [--seeds] [TARGET...]" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(frame request reply gateway)

if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "fuzz: clang is not installed; the fuzz targets need clang and its" \
       "libFuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev," \
       "as .ci/deps does)" >&2
  exit 1
fi

echo "== fuzz: building the targets in $dir"
if [ ! -f "$dir/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$src" -B "$dir" -DTL_FUZZ=ON \
    -DTL_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log" >&2
    echo "fuzz: configuring the clang build failed" >&2
    exit 1
  }
fi
if ! cmake --build "$dir" -j2 --target fuzz >"$dir/build.log" 2>&1; then
  grep -E 'error|undefined reference' "$dir/build.log" | head -20 >&2
  echo "fuzz: the build failed (is libclang-rt-14-dev, libFuzzer, installed?)" \
       "see $dir/build.log" >&2
  exit 1
fi

# The seeds as the encoders write them today.
rm -rf "$dir/seeds"
mkdir -p "$dir/seeds"
"$dir/tests/fuzz_seeds" "$dir/seeds"
if [ $seeds = 1 ]; then
  for d in "$dir/seeds"/*; do
    t=$(basename "$d")
    mkdir -p "$corpus/$t"
    find "$corpus/$t" -type f ! -name 'regress-*' -delete
    cp "$d"/* "$corpus/$t/"
  done
  echo "fuzz: wrote the seeds into $corpus; commit them"
  exit 0
fi
stale=0
for d in "$dir/seeds"/*; do
  t=$(basename "$d")
  if ! diff -rq -x 'regress-*' "$d" "$corpus/$t" >/dev/null 2>&1; then
    diff -rq -x 'regress-*' "$d" "$corpus/$t" >&2 || true
    stale=1
  fi
done
if [ $stale = 1 ]; then
  echo "fuzz: the committed seeds differ from what the encoders write now:" \
       "run tests/fuzz/run.sh --seeds and commit tests/fuzz/corpus" >&2
  exit 1
fi

failed=()
for t in "${targets[@]}"; do
  work=$dir/corpus/$t
  art=$dir/artifacts/$t
  rm -rf "$work" "$art"
  mkdir -p "$work" "$art"
  cp "$corpus/$t"/* "$work/"
  log=$dir/fuzz_$t.log
  # -timeout: one input running this long is a hang, and a failure.
  # -seed: the same mutations every run (TL_FUZZ_SEED=0: a random seed,
  # for exploring), so that a test run does not fail on luck.
  if "$dir/tests/fuzz_$t" -max_total_time="$secs" -timeout=10 \
      -seed="${TL_FUZZ_SEED:-1}" \
      -rss_limit_mb=2048 -artifact_prefix="$art/" "$work" >"$log" 2>&1 &&
      ! grep -q 'runtime error:' "$log"; then
    echo "fuzz_$t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 |
      sed -E 's/[[:space:]]+/ /g')"
  else
    echo "fuzz_$t: FAILED; the end of $log:" >&2
    tail -40 "$log" >&2
    echo "fuzz_$t: the input is in $art/; replay it with" \
         "$dir/tests/fuzz_$t FILE" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
