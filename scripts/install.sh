#!/bin/sh
# Installs tenferrod from a build folder: `make install` runs
#
#   scripts/install.sh BUILD DESTDIR PREFIX
#
# BUILD is the build folder (relative to the repository root or absolute),
# PREFIX the final location (/usr/local, /usr), DESTDIR an optional staging
# root prepended to every path written (packaging; empty to install for real).
# What goes where, PREFIX-relative unless noted:
#
#   bin/tenferrod, bin/tenferroctl      both in bin: tenferroctl is for users too, and the
#                                       daemon is normally started by systemd, not from PATH
#   lib/libtenferro-client.so.0 (+ .so) only when the build made it (not with STATIC_DEPS=1)
#   lib/libtenferro-client.a
#   include/tenferro/*.h                the public headers (include/tenferro/ holds only those)
#   share/tenferro/tenferro.proto       the wire format (docs/protocol.md)
#   lib/pkgconfig/tenferro-client.pc
#   lib/systemd/system/tenferrod@.service   with @BINDIR@ replaced
#   lib/sysusers.d/tenferro.conf, lib/tmpfiles.d/tenferro.conf
#   /etc/tenferro/tenferrod.conf.example    always under DESTDIR/etc (the daemon reads /etc),
#   /etc/tenferro/tenferrod.conf            copied from the example only when absent
set -eu

if [ $# -ne 3 ]; then
    echo "usage: $0 BUILD DESTDIR PREFIX" >&2
    exit 2
fi
BUILD=$1
DESTDIR=$2
PREFIX=$3
cd "$(dirname "$0")/.."

case $PREFIX in
/*) ;;
*) echo "install: PREFIX must be an absolute path, not \"$PREFIX\"" >&2; exit 2 ;;
esac
PREFIX=${PREFIX%/}
bindir=$PREFIX/bin
libdir=$PREFIX/lib
includedir=$PREFIX/include
root=$DESTDIR

for f in tenferrod tenferroctl libtenferro-client.a; do
    if [ ! -f "$BUILD/$f" ]; then
        echo "install: $BUILD/$f is missing: run make BUILD=$BUILD first" >&2
        exit 1
    fi
done

echo "install: into ${DESTDIR:+$DESTDIR (staging) }$PREFIX"
install -D -m 0755 "$BUILD/tenferrod" "$root$bindir/tenferrod"
install -D -m 0755 "$BUILD/tenferroctl" "$root$bindir/tenferroctl"

install -D -m 0644 "$BUILD/libtenferro-client.a" "$root$libdir/libtenferro-client.a"
if [ -f "$BUILD/libtenferro-client.so" ]; then
    install -D -m 0755 "$BUILD/libtenferro-client.so" "$root$libdir/libtenferro-client.so.0"
    ln -sf libtenferro-client.so.0 "$root$libdir/libtenferro-client.so"
    have_so=1
else
    echo "install: no $BUILD/libtenferro-client.so (a STATIC_DEPS=1 build): installing the static library only"
    rm -f "$root$libdir/libtenferro-client.so" "$root$libdir/libtenferro-client.so.0"
    have_so=0
fi

for h in include/tenferro/*.h; do
    install -D -m 0644 "$h" "$root$includedir/tenferro/$(basename "$h")"
done
# The wire contract, for clients in other languages (docs/protocol.md).
install -D -m 0644 proto/tenferro.proto "$root$PREFIX/share/tenferro/tenferro.proto"

# pkg-config: the version comes from the public version header. With only the
# static library installed, protobuf-c is a plain requirement (every link needs
# it); with the shared one, only a static link does.
version_part() {
    sed -n "s/^#define TF_VERSION_$1 \\([0-9][0-9]*\\).*/\\1/p" include/tenferro/version.h
}
version="$(version_part MAJOR).$(version_part MINOR).$(version_part PATCH)"
if [ "$have_so" = 1 ]; then requires="Requires.private"; else requires="Requires"; fi
mkdir -p "$root$libdir/pkgconfig"
cat >"$root$libdir/pkgconfig/tenferro-client.pc" <<EOF
prefix=$PREFIX
exec_prefix=\${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tenferro-client
Description: Client library of tenferrod, the per-device tensor execution daemon
Version: $version
$requires: libprotobuf-c
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltenferro-client
EOF
chmod 0644 "$root$libdir/pkgconfig/tenferro-client.pc"

unit_tmp=$(mktemp)
trap 'rm -f "$unit_tmp"' EXIT
sed "s|@BINDIR@|$bindir|g" systemd/tenferrod@.service >"$unit_tmp"
install -D -m 0644 "$unit_tmp" "$root$libdir/systemd/system/tenferrod@.service"
install -D -m 0644 systemd/tenferro.sysusers.conf "$root$libdir/sysusers.d/tenferro.conf"
install -D -m 0644 systemd/tenferro.tmpfiles.conf "$root$libdir/tmpfiles.d/tenferro.conf"

install -D -m 0644 etc/tenferrod.conf.example "$root/etc/tenferro/tenferrod.conf.example"
if [ -e "$root/etc/tenferro/tenferrod.conf" ]; then
    echo "install: keeping the existing $root/etc/tenferro/tenferrod.conf"
else
    install -m 0644 etc/tenferrod.conf.example "$root/etc/tenferro/tenferrod.conf"
fi

if [ -z "$DESTDIR" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null 2>&1; then ldconfig; fi
    cat <<EOF
install: done. To run the daemon under systemd:
  systemd-sysusers && systemd-tmpfiles --create
  systemctl daemon-reload
  systemctl enable --now tenferrod@0      # or tenferrod@cpu
  usermod -aG tenferro <user>             # users who may connect
EOF
fi
