#!/usr/bin/env bash
# Builds the RocksDB that Debian ships (the same version and Debian's own
# patches, from Debian's source package) as a release build, with
# assertions off, into DIR (default: build-rocksdb beside this checkout).
# Then: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release
# -DTL_ROCKSDB_DIR=DIR, and timelined runs on it.
#
# Why: Debian 12 builds librocksdb with CMake's build type "None", so
# NDEBUG is never defined: every assertion and test sync point of RocksDB
# runs in production (a memtable insert compares its key with its
# neighbours again at every level, for one). Measured here, the same
# broker binary on the two libraries: a fifth to a quarter less CPU per
# operation on this one, durable produce and the lease cycle 1.1-1.6 times
# as fast (docs/benchmarks.md, "The RocksDB it runs on"). timelined says
# at its start which kind it runs on.
#
# Environment: MIRROR (Debian's archive), JOBS (make's), SSE42=off (a
# library without SSE4.2 instructions, for a CPU that lacks them).
# Needs: root for apt-get (the build dependencies), deb.debian.org (or
# MIRROR), about 10-15 minutes on two cores and 2 GB of disk. The
# download is checked by apt against Debian's signed index; nothing on
# the system is changed but the packages installed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$here/build-rocksdb}")
mirror=${MIRROR:-http://deb.debian.org/debian}
jobs=${JOBS:-$(nproc)}

version=$(dpkg-query -W -f='${Version}' librocksdb-dev 2>/dev/null || true)
if [ -z "$version" ]; then
	echo "rocksdb-release: librocksdb-dev is not installed (bash .ci/deps installs it)" >&2
	exit 1
fi
. /etc/os-release
suite=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}

if [ -e "$dir" ] && [ ! -f "$dir/VERSION" ] && [ -n "$(ls -A "$dir")" ]; then
	echo "rocksdb-release: $dir is not empty and holds no build of this script" >&2
	exit 1
fi
if [ -f "$dir/VERSION" ] && [ "$(cat "$dir/VERSION")" = "$version" ]; then
	echo "rocksdb-release: $dir already holds RocksDB $version (release build)"
	exit 0
fi

need=()
for p in cmake g++ dpkg-dev liblz4-dev libzstd-dev libsnappy-dev zlib1g-dev libbz2-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rocksdb-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A private apt state: Debian's source index for this release only.
mkdir -p "$work/lists/partial" "$work/src"
printf 'deb-src %s %s main\n' "$mirror" "$suite" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list"
	-o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$work/lists"
	-o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/src" && apt-get "${apt_opts[@]}" source "rocksdb=$version" >/dev/null)
src=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'rocksdb-*' | head -n 1)

# Debian's own configuration (debian/rules: every compression library,
# PORTABLE) and flags, with -DNDEBUG added and only the shared library
# built.
cxxflags="$(dpkg-buildflags --get CXXFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
cxxflags="${cxxflags//-g /} -DNDEBUG"
cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
cflags="${cflags//-g /} -DNDEBUG"
# PORTABLE leaves RocksDB's CRC32C (every log record and table block) to a
# table-driven loop; where this CPU has the instructions, use them (the
# library then needs SSE4.2, which every x86-64 server of the last decade
# has). SSE42=off keeps it portable.
sse42=OFF
if [ "$(uname -m)" = x86_64 ] && [ "${SSE42:-auto}" != off ] &&
	grep -qw sse4_2 /proc/cpuinfo && grep -qw pclmulqdq /proc/cpuinfo; then
	sse42=ON
fi
cmake -S "$src" -B "$work/b" -DCMAKE_BUILD_TYPE=None -DFORCE_SSE42=$sse42 \
	-DCMAKE_CXX_FLAGS="$cxxflags" -DCMAKE_C_FLAGS="$cflags" \
	-DWITH_BZ2=ON -DWITH_LZ4=ON -DWITH_ZLIB=ON -DWITH_ZSTD=ON -DWITH_SNAPPY=ON \
	-DWITH_GFLAGS=OFF -DWITH_TESTS=OFF -DWITH_TOOLS=OFF -DWITH_CORE_TOOLS=OFF \
	-DWITH_BENCHMARK_TOOLS=OFF -DWITH_TRACE_TOOLS=OFF \
	-DROCKSDB_BUILD_SHARED=ON -DPORTABLE=ON -DFAIL_ON_WARNINGS=OFF >/dev/null
echo "rocksdb-release: building RocksDB $version with -DNDEBUG, SSE4.2 CRC32C $sse42 ($jobs jobs)"
cmake --build "$work/b" --target rocksdb-shared -j "$jobs" >"$work/build.log" 2>&1 || {
	tail -n 30 "$work/build.log" >&2
	exit 1
}

rm -rf "$dir"
mkdir -p "$dir/lib"
cp -P "$work"/b/librocksdb.so* "$dir/lib/"
cp -r "$src/include" "$dir/include"
echo "$version" >"$dir/VERSION"
echo "rocksdb-release: RocksDB $version (release build) in $dir"
echo "  cmake -S $here -B build-rel -DCMAKE_BUILD_TYPE=Release -DTL_ROCKSDB_DIR=$dir"
