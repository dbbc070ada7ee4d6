#!/bin/sh
# Installs what tenferrod needs to build and test, from Debian packages, when
# something is missing. Uses sudo when not root. Safe to run repeatedly.
set -eu

# clang and libclang-rt-dev (libFuzzer, ASan, UBSan) and dpkg-dev (dpkg-source, which unpacks
# protobuf-c's source package for the instrumented runtime) are for the fuzz targets;
# python3-dev and python3-venv for the Python package (make test-python: numpy and pytest come
# from PyPI into a venv).
PACKAGES="build-essential pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler check \
libsubunit-dev libinih-dev libsystemd-dev libopenblas-dev libfftw3-dev systemd \
clang libclang-rt-dev dpkg-dev python3-dev python3-venv"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing$missing"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-deps: need root or sudo to install:$missing" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq $missing
