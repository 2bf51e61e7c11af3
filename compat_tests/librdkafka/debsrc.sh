# Shared by the client-suite build scripts (source it; needs bash).
# Fetches a Debian source package into a work directory that is never committed.
#
#   ensure_deb_src            add deb-src entries mirroring the configured deb ones (once)
#   fetch_debian_source SRCPKG DIR
#                             download source package SRCPKG into DIR (idempotent: skips
#                             when DIR already holds its .dsc) and print the .dsc path

ensure_deb_src() {
    local list=/etc/apt/sources.list.d/strom-deb-src.sources
    local legacy=/etc/apt/sources.list.d/strom-deb-src.list
    if [[ -f $list || -f $legacy ]]; then
        return 0
    fi
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        # deb822 format: the same mirrors and suites, source type.
        sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$list"
    elif [[ -f /etc/apt/sources.list ]]; then
        sed -n -e 's/^deb /deb-src /p' /etc/apt/sources.list >"$legacy"
    else
        echo "no apt sources found to derive deb-src entries from" >&2
        return 1
    fi
    apt-get update -q
}

fetch_debian_source() {
    local pkg=$1 dir=$2 dsc
    mkdir -p "$dir"
    dsc=$(ls "$dir"/"${pkg}"_*.dsc 2>/dev/null | head -1 || true)
    if [[ -z $dsc ]]; then
        ensure_deb_src
        # --download-only: unpacking is done by the caller, which also copes with a
        # source package whose Debian tarball the mirror no longer carries.
        (cd "$dir" && apt-get source -q --download-only "$pkg") || true
        dsc=$(ls "$dir"/"${pkg}"_*.dsc 2>/dev/null | head -1 || true)
    fi
    if [[ -z $dsc ]]; then
        echo "could not fetch the Debian source of $pkg" >&2
        return 1
    fi
    echo "$dsc"
}
