#!/bin/sh
# Fetches the source of the protobuf-c runtime for the fuzz build, so that
# libFuzzer sees inside the decoder (the installed libprotobuf-c.so is not
# instrumented). The source is the distribution's own source package of the
# exact version whose headers are installed (libprotobuf-c-dev), fetched with
# apt-get through a private configuration (a deb-src entry of its own, its own
# lists and cache under DEST): the machine's apt configuration is not touched.
# Cached: a second run finds it and fetches nothing.
#
#   scripts/fetch-protobuf-c.sh DEST     prints the path of protobuf-c/protobuf-c.c
#
# Fails (non-zero, the reason on stderr) when the source cannot be fetched or
# does not match the installed headers; the Makefile then links the system's
# uninstrumented library and says so (docs/fuzzing.md).
set -eu

say() { echo "fetch-protobuf-c: $*" >&2; }
mkdir -p "${1:?usage: fetch-protobuf-c.sh DEST}"
dest=$(cd "$1" && pwd)

version=$(dpkg-query -W -f='${source:Version}' libprotobuf-c-dev 2>/dev/null) || {
    say "libprotobuf-c-dev is not installed (make deps)"
    exit 1
}
package=$(dpkg-query -W -f='${source:Package}' libprotobuf-c-dev)
installed=$(dpkg-query -W -f='${Version}' libprotobuf-c-dev)
upstream=${version#*:}
upstream=${upstream%-*}
dir=$dest/$package-$upstream
src=$dir/protobuf-c/protobuf-c.c
header=/usr/include/protobuf-c/protobuf-c.h

if [ ! -f "$src" ]; then
    # shellcheck source=/dev/null # the machine's, read at run time
    . /etc/os-release
    codename=${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}
    case "$ID" in
    debian)
        mirror=http://deb.debian.org/debian
        keyring=/usr/share/keyrings/debian-archive-keyring.gpg
        suites="$codename $codename-updates"
        components=main
        ;;
    ubuntu)
        mirror=http://archive.ubuntu.com/ubuntu
        keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg
        suites="$codename $codename-updates $codename-security"
        components="main universe"
        ;;
    *)
        say "no source mirror known for $ID"
        exit 1
        ;;
    esac
    apt=$dest/apt
    rm -rf "$apt" "$dir"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/download"
    for s in $suites; do
        echo "deb-src [signed-by=$keyring] $mirror $s $components"
    done > "$apt/sources.list"
    # A private configuration: its own source list, lists and cache; downloads run as the caller.
    set -- -q -o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache" \
        -o APT::Sandbox::User="$(id -un)"
    say "fetching the source package $package $version (libprotobuf-c-dev $installed) from $mirror"
    if ! apt-get "$@" update >"$apt/update.log" 2>&1; then
        say "apt-get update with a deb-src entry failed (see $apt/update.log)"
        exit 1
    fi
    if ! (cd "$apt/download" && apt-get "$@" source --download-only "$package=$version") \
        >"$apt/source.log" 2>&1; then
        say "apt-get source $package=$version failed (see $apt/source.log)"
        exit 1
    fi
    # apt checked every file against the signed index; the .dsc's own signature is not needed.
    if ! dpkg-source --no-check -x "$apt/download/${package}_${version#*:}.dsc" "$dir" \
        >"$apt/extract.log" 2>&1; then
        say "dpkg-source could not unpack the source (see $apt/extract.log)"
        exit 1
    fi
    rm -f "$dest/${package}_$upstream.orig.tar."*
fi

if [ ! -f "$src" ]; then
    say "$src is missing from the source package"
    exit 1
fi
if ! cmp -s "$dir/protobuf-c/protobuf-c.h" "$header"; then
    say "the fetched protobuf-c.h differs from the installed $header: versions do not match"
    exit 1
fi
echo "$src"
