#!/usr/bin/env bash
# Fetch kcat's Debian source package (source package "kafkacat") and set up its test
# scripts (tests/*.sh) in the ignored work dir. The scripts call "../kcat": that is
# Debian's kcat binary, the packaged build of this same source, so the suite tests the
# kcat users install. Idempotent. Usage: compat_tests/kcat_suite/build.sh [WORK_DIR]
# Prints the source tree's path on its last line.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-${STROM_SUITES_WORK:-/tmp/strom-client-suites}}"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=../librdkafka/debsrc.sh
source "$here/../librdkafka/debsrc.sh"

need=()
command -v kcat >/dev/null || need+=(kcat)
command -v jq >/dev/null || need+=(jq)      # 0002-delim.sh reads kcat's JSON with jq
if ((${#need[@]})); then
    ensure_deb_src
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

find_tree() { ls -d "$work"/kafkacat-[0-9]* 2>/dev/null | head -1 || true; }
tree=$(find_tree)
if [[ -z $tree ]]; then
    dsc=$(fetch_debian_source kafkacat "$work")
    # The upstream tarball carries the tests; unpack it directly (dpkg-source would
    # also need the Debian tarball, which only adds packaging files).
    orig=$(ls "$work"/kafkacat_*.orig.tar.gz 2>/dev/null | head -1 || true)
    [[ -n $orig ]] || { echo "no kafkacat upstream tarball next to $dsc" >&2; exit 1; }
    tar -xzf "$orig" -C "$work"
    tree=$(find_tree)
fi

src_version=${tree##*/kafkacat-}
if ! kcat -V 2>&1 | grep -q "Version $src_version"; then
    echo "warning: installed kcat is not version $src_version" >&2
fi
ln -sfn "$(command -v kcat)" "$tree/kcat"
test -x "$tree/kcat"
echo "$tree"
