#!/bin/sh
# tenferrod-node.sh: the tenferrod DaemonSet's entry point (docs/cluster.md,
# "Kubernetes"): what tenferrod@N does under systemd, for every GPU of the node.
#
# Starts one tenferrod per device, each listening on
#   $TENFERRO_SOCKET_ROOT/gpu-N/tenferrod-N.sock      (default root /run/tenferro)
# in a folder of its own, so the device plugin can mount exactly one GPU's folder
# into a pod; the folder outlives a restart of its daemon, so pods see the new
# socket where the old one was. The devices are TENFERRO_DEVICES (a list such as
# "0 1 2 3", or "cpu"), else every /dev/nvidiaN the container sees.
#
# Like the unit's Restart=on-failure, a daemon that exits non-zero (a lost
# device exits 1) is started again after 2 s; one that exits 0 (an admin drain)
# stays stopped. SIGTERM (the pod stopping) is passed to every daemon, which
# drain their clients; the script exits 0 when all have stopped (the kubelet
# then starts the container again, unless the pod is going away). Arguments are
# passed to every tenferrod (e.g. --config /etc/tenferro/tenferrod.conf).
set -u

root=${TENFERRO_SOCKET_ROOT:-/run/tenferro}
tenferrod=${TENFERROD:-tenferrod}
devices=${TENFERRO_DEVICES:-}
if [ -z "$devices" ]; then
    for node in /dev/nvidia[0-9]*; do
        [ -e "$node" ] || continue
        devices="${devices:+$devices }${node#/dev/nvidia}"
    done
fi
if [ -z "$devices" ]; then
    echo "tenferrod-node: no /dev/nvidiaN in this container and TENFERRO_DEVICES is unset;" \
        "give the pod the node's GPUs (runtimeClassName: nvidia, NVIDIA_VISIBLE_DEVICES=all)" >&2
    exit 1
fi

stopping=0
supervisors=""

# Runs the daemon of device $1 (with the arguments after it) until it exits 0 or the pod
# stops, and starts it again 2 s after it fails.
supervise() {
    device=$1
    shift
    dir=$root/gpu-$device
    mkdir -p "$dir"
    pid=""
    trap 'stopping=1; if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null; fi' TERM
    while [ "$stopping" -eq 0 ]; do
        "$tenferrod" --device "$device" --socket "$dir/tenferrod-$device.sock" "$@" &
        pid=$!
        rc=0
        wait "$pid" || rc=$?
        # A TERM interrupts the wait; wait again until the daemon has drained and exited.
        while kill -0 "$pid" 2>/dev/null; do
            rc=0
            wait "$pid" || rc=$?
        done
        pid=""
        if [ "$stopping" -ne 0 ] || [ "$rc" -eq 0 ]; then
            echo "tenferrod-node: tenferrod $device exited $rc; not starting it again" >&2
            break
        fi
        echo "tenferrod-node: tenferrod $device exited $rc; starting it again in 2 s" >&2
        sleep 2
    done
}

for device in $devices; do
    supervise "$device" "$@" &
    supervisors="$supervisors $!"
done
echo "tenferrod-node: serving device(s) $devices under $root" >&2

# The pod is stopping: every daemon drains its clients and exits.
stop() {
    stopping=1
    for s in $supervisors; do kill -TERM "$s" 2>/dev/null; done
}
trap stop TERM INT

for s in $supervisors; do
    while kill -0 "$s" 2>/dev/null; do wait "$s" || true; done
done
echo "tenferrod-node: every daemon has stopped" >&2
