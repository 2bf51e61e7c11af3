#!/usr/bin/env bash
# Fetch a librdkafka whose suite runs in KIP-848 mode (TEST_CONSUMER_GROUP_PROTOCOL=consumer) and
# build its test-runner into WORK_DIR/kip848. The classic suite (build.sh) is bookworm's 2.0.2, which
# has no client side of the consumer group protocol; Debian's unstable suite carries 2.14.2, fetched
# as a source package through a private apt list (nothing is added to the system's apt sources, no
# binary package comes from unstable). Idempotent: does nothing once the runner exists.
# Usage: compat_tests/librdkafka/build_kip848.sh [WORK_DIR]; prints the tree's path on its last line.
set -euo pipefail

version=2.14.2
debian_version=$version-1
suite=sid
work="${1:-${STROM_SUITES_WORK:-/tmp/strom-client-suites}}/kip848"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
tree=$work/librdkafka-$version

if [[ -x $tree/tests/test-runner ]] && grep -qs "WITH_RAPIDJSON 1" "$tree/config.h"; then
    echo "librdkafka $version test-runner already built"
    echo "$tree"
    exit 0
fi

# The same build dependencies as build.sh (toolchain, zlib, zstd, RapidJSON).
need=()
for pkg in make gcc g++ pkg-config zlib1g-dev libzstd-dev rapidjson-dev dpkg-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if [[ ! -d $tree ]]; then
    apt_dir=$work/apt
    mkdir -p "$apt_dir/lists/partial"
    # unstable and testing: when unstable moves on, testing keeps the pinned version for a while longer.
    for from in $suite testing; do
        echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $from main"
    done >"$apt_dir/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "APT::Get::List-Cleanup=0")
    if ! ls "$work"/librdkafka_"$version".orig.tar.gz >/dev/null 2>&1; then
        apt-get -q "${opts[@]}" update
        (cd "$work" && apt-get -q "${opts[@]}" source --download-only "librdkafka=$debian_version") || {
            echo "librdkafka $debian_version is no longer in Debian $suite or testing: update version= in $0," \
                 "then run the consumer-protocol suite again and re-record (runner.py --mode consumer --all --record)" >&2
            exit 1
        }
    fi
    top=$(tar -tzf "$work/librdkafka_$version.orig.tar.gz" | awk -F/ 'NR == 1 { print $1 }')
    tar -xzf "$work/librdkafka_$version.orig.tar.gz" -C "$work"
    mv "$work/$top" "$tree"
fi

cd "$tree"
if [[ ! -f Makefile.config ]]; then
    ./configure --disable-ssl --disable-gssapi --disable-curl --disable-lz4-ext \
        --enable-zlib --enable-zstd >strom-build-configure.log 2>&1 || { tail -30 strom-build-configure.log; exit 1; }
fi
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" libs >strom-build-libs.log 2>&1 || { tail -40 strom-build-libs.log; exit 1; }
make -j"$jobs" -C tests build >strom-build-tests.log 2>&1 || { tail -40 strom-build-tests.log; exit 1; }
test -x tests/test-runner
echo "$tree"
