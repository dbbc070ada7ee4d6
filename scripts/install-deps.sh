#!/bin/sh
# Installs what tenferrod needs to build and test, from Debian packages, when
# something is missing. Uses sudo when not root. Safe to run repeatedly.
#
#   scripts/install-deps.sh          the build, `make test`, the fuzz targets
#   scripts/install-deps.sh slurm    Slurm and MUNGE, for `make test-slurm`
#   scripts/install-deps.sh lint     shellcheck and python3-venv, for `make test-lint`
#                                    and `make test-kubernetes`
set -eu

group=${1:-build}
case $group in
build)
    # clang and libclang-rt-dev (libFuzzer, ASan, UBSan) and dpkg-dev (dpkg-source, which unpacks
    # protobuf-c's source package for the instrumented runtime) are for the fuzz targets;
    # python3-dev and python3-venv for the Python package (make test-python: numpy and pytest
    # come from PyPI into a venv); liblapacke-dev for <lapack.h>, the prototypes of the LAPACK
    # inside OpenBLAS (daemon/backend/cpu/linalg.c).
    PACKAGES="build-essential pkg-config libuv1-dev libprotobuf-c-dev protobuf-c-compiler check \
libsubunit-dev libinih-dev libsystemd-dev libopenblas-dev liblapacke-dev libfftw3-dev systemd \
clang libclang-rt-dev dpkg-dev python3-dev python3-venv"
    ;;
slurm) PACKAGES="slurmctld slurmd slurm-client munge" ;;
lint) PACKAGES="shellcheck python3-venv" ;;
*)
    echo "usage: $0 [build|slurm|lint]" >&2
    exit 2
    ;;
esac

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

# Debian's slurmctld, slurmd and munge start their services when installed; the Slurm test
# runs its own, privately, and nothing here should start system services. Where no
# policy-rc.d exists, one that refuses every start (101, invoke-rc.d's "action forbidden")
# is in place for the install and removed after it.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ "$group" = slurm ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# tenferrod install-deps.sh: no service starts during this install\nexit 101\n' |
        $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
fi
remove_policy() {
    if [ "$made_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi
}
trap remove_policy EXIT

$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq $missing
