#!/usr/bin/env bash
# Fetch librdkafka's Debian source package and build its regression-test runner
# (tests/test-runner) into the ignored work dir. Idempotent: does nothing once the
# runner exists. Usage: compat_tests/librdkafka/build.sh [WORK_DIR]
# Prints the source tree's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-${STROM_SUITES_WORK:-/tmp/strom-client-suites}}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=debsrc.sh
source "$here/debsrc.sh"

find_tree() { ls -d "$work"/librdkafka-[0-9]* 2>/dev/null | head -1 || true; }

tree=$(find_tree)
if [[ -n $tree && -x $tree/tests/test-runner ]] && grep -qs "WITH_RAPIDJSON 1" "$tree/config.h"; then
    echo "librdkafka test-runner already built"
    echo "$tree"
    exit 0
fi

# Build dependencies: a toolchain, zlib and zstd (gzip/zstd codecs; snappy and lz4
# are built in), RapidJSON (header-only: the tests that check the statistics JSON).
# SSL, SASL and curl are left out: Strom offers none of them.
need=()
for pkg in make gcc g++ pkg-config zlib1g-dev libzstd-dev rapidjson-dev dpkg-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
    ensure_deb_src
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

if [[ -z $tree ]]; then
    dsc=$(fetch_debian_source librdkafka "$work")
    (cd "$work" && dpkg-source -x --skip-patches "$(basename "$dsc")" >/dev/null 2>&1) || {
        # Unpack the upstream tarball by hand if dpkg-source cannot.
        tar -xzf "$work"/librdkafka_*.orig.tar.gz -C "$work"
    }
    tree=$(find_tree)
fi

cd "$tree"
# A tree configured before RapidJSON was a dependency is configured again.
if [[ -f config.h ]] && ! grep -q "WITH_RAPIDJSON 1" config.h; then
    rm -f Makefile.config config.h config.cache
fi
if [[ ! -f Makefile.config ]]; then
    ./configure --disable-ssl --disable-gssapi --disable-curl --disable-lz4-ext \
        --enable-zlib --enable-zstd >strom-build-configure.log 2>&1 || { tail -30 strom-build-configure.log; exit 1; }
fi
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs" libs >strom-build-libs.log 2>&1 || { tail -40 strom-build-libs.log; exit 1; }
make -j"$jobs" -C tests build >strom-build-tests.log 2>&1 || { tail -40 strom-build-tests.log; exit 1; }
test -x tests/test-runner
echo "$tree"
