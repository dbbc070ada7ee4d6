#!/bin/sh
# The Kubernetes manifests' test (`make test-kubernetes`, part of `make check`):
#
#   tests/kubernetes/test-manifests.sh BUILD
#
# Checks contrib/kubernetes/ without a cluster:
#   (a) every manifest validates, strictly (no unknown field), against the
#       Kubernetes API schemas of the oldest and newest release it targets, with
#       kubernetes-validate from PyPI (installed into BUILD/kubernetes-validate,
#       a virtual environment); a broken copy of a DaemonSet must fail, so the
#       validator is known to be checking;
#   (b) kustomization.yaml names every manifest but the example pod, and the
#       files of its ConfigMap, and the DaemonSet runs the script and the
#       configuration from where that ConfigMap is mounted;
#   (c) the DaemonSet's entry point, tenferrod-node.sh, with the real daemon and
#       contrib/kubernetes/tenferrod.conf: it serves a device on
#       ROOT/gpu-D/tenferrod-D.sock with that file's settings, starts a daemon
#       that was killed again, and stops every daemon on SIGTERM.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
k8s=contrib/kubernetes
# The Kubernetes releases the manifests are written for: the oldest and the newest checked.
versions="1.29.0 1.37.0"
validator_version=1.37.0

tmp=$(mktemp -d /tmp/tf-k8s.XXXXXX)
node_pid=""
cleanup() {
    status=$?
    if [ -n "$node_pid" ]; then
        kill -TERM "$node_pid" 2>/dev/null || true
        wait "$node_pid" 2>/dev/null || true
    fi
    if [ "$status" -eq 0 ]; then rm -rf "$tmp"; else echo "test-kubernetes: files kept in $tmp" >&2; fi
}
trap cleanup EXIT

fail() {
    echo "test-kubernetes: FAIL: $*" >&2
    [ ! -f "$tmp/node.log" ] || { echo "---- $tmp/node.log" >&2; tail -n 30 "$tmp/node.log" >&2; }
    exit 1
}

# Runs a command every 0.1 s until it succeeds, for at most $1 tenths of a second.
wait_until() {
    tries=$1
    shift
    n=0
    until "$@"; do
        n=$((n + 1))
        [ "$n" -lt "$tries" ] || return 1
        sleep 0.1
    done
}

# ---- (a) the schemas ----
venv=$BUILD/kubernetes-validate
if [ ! -x "$venv/bin/kubernetes-validate" ] ||
    [ "$("$venv/bin/kubernetes-validate" --version 2>/dev/null)" != "$validator_version" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv (scripts/install-deps.sh lint installs python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$validator_version" ||
        fail "pip install kubernetes-validate==$validator_version (from PyPI)"
fi
manifests=""
for f in "$k8s"/*.yaml; do
    [ "$(basename "$f")" = kustomization.yaml ] || manifests="$manifests $f"
done
for v in $versions; do
    # shellcheck disable=SC2086 # a list of files
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" $manifests >"$tmp/validate.log" 2>&1 ||
        fail "kubernetes-validate -k $v: $(cat "$tmp/validate.log")"
done
sed 's/^\(      \)containers:/\1contaners:/' "$k8s/tenferrod-daemonset.yaml" >"$tmp/broken.yaml"
if "$venv/bin/kubernetes-validate" --strict --quiet -k 1.29.0 "$tmp/broken.yaml" >/dev/null 2>&1; then
    fail "kubernetes-validate accepted a DaemonSet without containers"
fi
echo "test-kubernetes: (a) $(echo "$manifests" | wc -w) manifests valid (strict) against Kubernetes $versions" \
    "(kubernetes-validate $validator_version); a broken one is refused: ok"

# ---- (b) the kustomization and the ConfigMap it makes ----
"$venv/bin/python" - "$k8s" <<'EOF' || fail "the kustomization does not match the manifests"
import os, sys, yaml
k8s = sys.argv[1]
kust = yaml.safe_load(open(os.path.join(k8s, "kustomization.yaml")))
listed = set(kust["resources"])
present = {f for f in os.listdir(k8s) if f.endswith(".yaml")} - {"kustomization.yaml", "example-pod.yaml"}
assert listed == present, f"kustomization.yaml lists {sorted(listed)}, the folder has {sorted(present)}"
(gen,) = kust["configMapGenerator"]
for f in gen["files"]:
    assert os.path.isfile(os.path.join(k8s, f)), f"the ConfigMap's file {f} is missing"
ds = yaml.safe_load(open(os.path.join(k8s, "tenferrod-daemonset.yaml")))
pod = ds["spec"]["template"]["spec"]
(c,) = pod["containers"]
volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == gen["name"])
mount = next(m for m in c["volumeMounts"] if m["name"] == volume["name"])["mountPath"]
assert c["command"][-1] == f"{mount}/tenferrod-node.sh", c["command"]
assert c["args"] == ["--config", f"{mount}/tenferrod.conf"], c["args"]
images = {i["name"] for i in kust["images"]}
used = {c["image"]}
for f in ("device-plugin-daemonset.yaml",):
    used |= {x["image"] for x in yaml.safe_load(open(os.path.join(k8s, f)))["spec"]["template"]["spec"]["containers"]}
assert used <= images, f"images {sorted(used - images)} are not set in kustomization.yaml"
EOF
echo "test-kubernetes: (b) kustomization.yaml lists every manifest, the ConfigMap's files exist and" \
    "the DaemonSet runs them from its mount: ok"

# ---- (c) the entry point with the real daemon ----
root=$tmp/run
sock=$root/gpu-cpu/tenferrod-cpu.sock
TENFERRO_SOCKET_ROOT=$root TENFERRO_DEVICES=cpu TENFERROD=$BUILD/tenferrod \
    sh "$k8s/tenferrod-node.sh" --config "$k8s/tenferrod.conf" --workers 1 >"$tmp/node.log" 2>&1 &
node_pid=$!
answers() { "$BUILD/tenferroctl" --socket "$sock" status --json >"$tmp/status.json" 2>/dev/null; }
wait_until 100 answers || fail "tenferrod-node.sh did not serve $sock"
grep -q '"policy":"wait"' "$tmp/status.json" || fail "the daemon does not run $k8s/tenferrod.conf's policy"
grep -q '"client":{"device_bytes":19327352832,' "$tmp/status.json" ||
    fail "the daemon does not run $k8s/tenferrod.conf's [quota.client] device_bytes"
[ "$(stat -c %a "$sock")" = 666 ] || fail "the socket is $(stat -c %a "$sock"), not 0666"
daemon=$(pgrep -f "tenferrod --device cpu --socket $sock" | head -n 1)
[ -n "$daemon" ] || fail "no tenferrod process serves $sock"
kill -KILL "$daemon"
restarted() { answers && [ "$(pgrep -f "tenferrod --device cpu --socket $sock" | head -n 1)" != "$daemon" ]; }
wait_until 100 restarted || fail "tenferrod-node.sh did not start the killed daemon again"
grep -q "exited 137; starting it again" "$tmp/node.log" || fail "tenferrod-node.sh did not say it restarted it"
kill -TERM "$node_pid"
rc=0
wait "$node_pid" || rc=$?
node_pid=""
[ "$rc" -eq 0 ] || fail "tenferrod-node.sh exited $rc on SIGTERM"
if pgrep -f "tenferrod --device cpu --socket $sock" >/dev/null; then fail "a daemon outlived SIGTERM"; fi
[ ! -e "$sock" ] || fail "the stopped daemon left its socket"
echo "test-kubernetes: (c) tenferrod-node.sh served $k8s/tenferrod.conf's daemon on gpu-cpu/, started it" \
    "again after SIGKILL, stopped on SIGTERM: ok"
