#!/bin/sh
# The demo: starts tenferrod on the best device present (--device auto), runs
# the example client against it, shows `tenferroctl status`, stops the daemon.
# Exits non-zero if any step fails or the daemon does not stop cleanly.
set -eu
BUILD=${1:-build}
SOCK=/tmp/tenferro-demo-$$.sock
LOG=/tmp/tenferro-demo-$$.log

"$BUILD/tenferrod" --device auto --socket "$SOCK" 2>"$LOG" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null || true; rm -f "$SOCK"' EXIT

# Wait until the daemon answers.
i=0
until "$BUILD/tenferroctl" --socket "$SOCK" status >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 200 ] || ! kill -0 $DAEMON 2>/dev/null; then
        echo "demo: tenferrod did not start:" >&2
        cat "$LOG" >&2
        exit 1
    fi
    sleep 0.05
done
echo "== tenferrod started:"
sed 's/^<[0-9]>/  /' "$LOG"

echo "== example client (examples/demo-client.c):"
"$BUILD/examples/demo-client" "$SOCK"

echo "== tenferroctl status:"
"$BUILD/tenferroctl" --socket "$SOCK" status

echo "== stopping tenferrod (SIGTERM)"
kill -TERM $DAEMON
rc=0
wait $DAEMON || rc=$?
trap - EXIT
rm -f "$SOCK"
if [ $rc -ne 0 ]; then
    echo "demo: tenferrod exited with status $rc" >&2
    cat "$LOG" >&2
    exit 1
fi
echo "demo: done, tenferrod stopped cleanly"
