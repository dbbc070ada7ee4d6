#!/bin/sh
# The Slurm test (`make test-slurm`, part of `make check`):
#
#   tests/slurm/test-slurm.sh BUILD
#
# Starts a real single-node Slurm on this machine: munged, slurmctld and slurmd
# from Debian's packages (scripts/install-deps.sh slurm), with a private
# configuration under a temporary folder (MUNGE socket and key, state, spool,
# logs, ports on 127.0.0.1 that nothing else uses), the gres.conf and slurm.conf
# lines of contrib/slurm/ for a node with two GPUs and four shares on each, and
# contrib/slurm/tenferro-task-prolog and tenferro-epilog as TaskProlog and
# Epilog. Two tenferrod CPU daemons stand in for the two GPUs' daemons
# (tenferrod-0.sock and tenferrod-1.sock in the folder), and two character
# device nodes for /dev/nvidia0 and /dev/nvidia1. Then it submits jobs with
# sbatch and srun --gres=shard:N that run tests/slurm/slurm-client.c and checks:
#   (a) every task got the socket of the daemon of its allocated share: two jobs
#       that each take one GPU's four shares land on different GPUs, each task's
#       TENFERRO_SOCKET and TENFERRO_DEVICE follow the GPU Slurm gave it (the
#       batch script's and the tasks' of a step inside it), and that daemon, not
#       the other, lists the task's process among its clients;
#   (b) two jobs on shares of one GPU contend as the daemon's policy says: with
#       [admission] policy = wait the second's tf_session_open queues behind the
#       first's held session (the daemon lists it queued) and is admitted when
#       the first closes; after a reload to reject it fails with TF_ERR_CONTENDED;
#   (c) scancel of a running job whose client left the job (setsid) with a held
#       session and 4 MiB of tensors: Slurm ends the job, the Epilog terminates
#       that client, and the daemon's status is back to its baseline (no client,
#       no bytes, the domain free); the client saw TF_ERR_DISCONNECTED
#       "terminated by an administrator";
#   (d) a job asking for more shares than the node has is refused at submission;
#       one asking for a share while every share is taken pends (Reason=Resources)
#       and runs, on the freed GPU, once a job leaves; one asking for more shares
#       than one GPU has pends even on an idle node (Slurm 22.05 takes a job's
#       shares on a node from one GPU);
#   (e) a task without any GRES gets TENFERRO_SOCKET unset (even when the
#       submitting shell set it), and the client's error names TENFERRO_SOCKET and
#       the default socket paths (checked where no default socket exists).
# Everything it starts it stops, jobs included; it checks that nothing is left.
# Needs root (slurmd runs jobs as their users; mknod); exits 0 with a SKIP line
# when not root.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
repo=$(pwd)
client=$BUILD/tests/slurm-client
ctl=$BUILD/tenferroctl
started=$(date +%s)

if [ "$(id -u)" -ne 0 ]; then
    echo "test-slurm: SKIP: needs root (slurmd, mknod); run make test-slurm as root"
    exit 0
fi
for prog in munged slurmctld slurmd sbatch srun squeue scontrol scancel setsid; do
    command -v "$prog" >/dev/null 2>&1 ||
        { echo "test-slurm: $prog is missing: run scripts/install-deps.sh slurm" >&2; exit 1; }
done
for f in "$client" "$ctl" "$BUILD/tenferrod"; do
    [ -x "$f" ] || { echo "test-slurm: $f is not built (make all)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/tf-slurm.XXXXXX)
# munged insists that everyone may traverse the folders above its socket.
chmod 755 "$tmp"
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/dev" "$tmp/run" "$tmp/out" "$tmp/etc"
munged_pid=""
ctld_pid=""
slurmd_pid=""
daemon0_pid=""
daemon1_pid=""
srun_pid=""
node=tfnode
export SLURM_CONF="$tmp/etc/slurm.conf"
unset SLURM_JOB_ID SLURM_JOBID TENFERRO_SOCKET TENFERRO_DEVICE 2>/dev/null || true

# Kills pid $1 (when set and alive) with TERM, then KILL after 5 s, and reaps it.
stop_pid() {
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null || return 0
    sp_n=0
    while kill -0 "$1" 2>/dev/null && [ "$sp_n" -lt 50 ]; do
        sleep 0.1
        sp_n=$((sp_n + 1))
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# The pids of slurm-client processes still alive that printed READY into our outputs.
leftover_clients() {
    sed -n 's/^READY .*pid=\([0-9]*\).*/\1/p' "$tmp"/out/*.out 2>/dev/null | while read -r lc_pid; do
        if grep -q slurm-client "/proc/$lc_pid/cmdline" 2>/dev/null; then echo "$lc_pid"; fi
    done
}

# Stops the jobs, then every daemon this script started, in the reverse order; then checks
# that none of them, no job step and no client is left.
cleanup() {
    status=$?
    set +e
    if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null; then
        jobs_left=$(squeue -h -o %i 2>/dev/null)
        # shellcheck disable=SC2086 # a list of job ids
        [ -z "$jobs_left" ] || scancel $jobs_left 2>/dev/null
        cl_n=0
        while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ "$cl_n" -lt 150 ]; do
            sleep 0.2
            cl_n=$((cl_n + 1))
        done
    fi
    [ -z "$srun_pid" ] || stop_pid "$srun_pid"
    for cl_p in $(leftover_clients); do stop_pid "$cl_p"; done
    stop_pid "$slurmd_pid"
    stop_pid "$ctld_pid"
    stop_pid "$daemon0_pid"
    stop_pid "$daemon1_pid"
    stop_pid "$munged_pid"
    left=""
    for cl_p in $slurmd_pid $ctld_pid $daemon0_pid $daemon1_pid $munged_pid $(leftover_clients); do
        if kill -0 "$cl_p" 2>/dev/null; then left="$left $cl_p"; fi
    done
    # A job step that outlived its slurmd still has its socket in the spool folder.
    steps=$(find "$tmp/spool" -type s 2>/dev/null)
    if [ -n "$left" ] || [ -n "$steps" ]; then
        echo "test-slurm: FAIL: still running after the test: pids$left; step sockets: $steps" >&2
        status=1
    fi
    if [ "$status" -eq 0 ]; then rm -rf "$tmp"; else echo "test-slurm: files kept in $tmp" >&2; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
    echo "test-slurm: FAIL: $*" >&2
    for log in "$tmp"/log/*.log "$tmp"/out/*.out; do
        [ -f "$log" ] || continue
        echo "---- $log" >&2
        tail -n 25 "$log" >&2
    done
    exit 1
}

# Runs a command every 0.2 s until it succeeds, for at most $1 seconds.
# (Every helper's variables have a prefix of their own: POSIX sh has no local ones, and the
# command wait_for runs may be another helper.)
wait_for() {
    wf_limit=$(($1 * 5))
    shift
    wf_n=0
    until "$@"; do
        wf_n=$((wf_n + 1))
        [ "$wf_n" -lt "$wf_limit" ] || return 1
        sleep 0.2
    done
}

# A TCP port on 127.0.0.1 that nothing uses (neither listening nor connected), from $1 on.
free_port() {
    fp_port=$1
    while grep -qi ":$(printf '%04X' "$fp_port") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
        fp_port=$((fp_port + 1))
    done
    echo "$fp_port"
}

# ---- the private cluster ----
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$tmp/munge/munge.key"
munged --foreground --force --socket="$tmp/munge/munge.sock" --key-file="$tmp/munge/munge.key" \
    --log-file="$tmp/log/munged.log" --pid-file="$tmp/munge/munged.pid" \
    --seed-file="$tmp/munge/munged.seed" >"$tmp/log/munged.out.log" 2>&1 &
munged_pid=$!
wait_for 10 test -S "$tmp/munge/munge.sock" || fail "munged did not start"

# Stand-ins for the GPUs' device nodes: gres/gpu wants character devices (nothing opens these).
mknod -m 600 "$tmp/dev/nvidia0" c 1 3
mknod -m 600 "$tmp/dev/nvidia1" c 1 3

# Both daemons read one file, so a reload changes the policy of both.
cat >"$tmp/etc/tenferrod.conf" <<EOF
[admission]
policy = wait
wait_deadline_ms = 30000
EOF
for d in 0 1; do
    "$BUILD/tenferrod" --device cpu --workers 1 --config "$tmp/etc/tenferrod.conf" \
        --socket "$tmp/run/tenferrod-$d.sock" >"$tmp/log/tenferrod-$d.log" 2>&1 &
    eval "daemon${d}_pid=\$!"
done
for d in 0 1; do
    wait_for 20 "$ctl" --socket "$tmp/run/tenferrod-$d.sock" status >/dev/null 2>&1 ||
        fail "tenferrod $d did not start"
done

# The settings the TaskProlog and Epilog read, and the two as slurm.conf names them.
cat >"$tmp/etc/slurm.env" <<EOF
TENFERRO_SOCKET_DIR=$tmp/run
TENFERROCTL=$ctl
TENFERRO_SLURM_LOG=$tmp/log/epilog.log
EOF
for s in task-prolog epilog; do
    printf '#!/bin/sh\nTENFERRO_SLURM_ENV=%s exec %s\n' "$tmp/etc/slurm.env" \
        "$repo/contrib/slurm/tenferro-$s" >"$tmp/etc/$s"
    chmod 755 "$tmp/etc/$s"
done

ctld_port=$(free_port 16817)
slurmd_port=$(free_port $((ctld_port + 1)))
host=$(hostname -s)
gres_types=$(grep '^GresTypes=' contrib/slurm/slurm.conf)
node_gres=$(sed -n 's/^NodeName=.* \(Gres=[^ ]*\).*/\1/p' contrib/slurm/slurm.conf)
if [ -z "$gres_types" ] || [ -z "$node_gres" ]; then
    fail "contrib/slurm/slurm.conf has no GresTypes= or Gres="
fi
cat >"$SLURM_CONF" <<EOF
ClusterName=tftest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=2
MinJobAge=600
# Try each job at once when it is submitted, and the pending ones every 2 s.
SchedulerParameters=batch_sched_delay=0,sched_interval=2
$gres_types
TaskProlog=$tmp/etc/task-prolog
Epilog=$tmp/etc/epilog
NodeName=$node NodeAddr=127.0.0.1 NodeHostname=$host CPUs=8 RealMemory=1000 $node_gres State=UNKNOWN
PartitionName=tf Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
# contrib/slurm/gres.conf, for this node and its stand-in device nodes.
grep '^Name=' contrib/slurm/gres.conf | sed "s|^|NodeName=$node |; s|/dev/nvidia|$tmp/dev/nvidia|" \
    >"$tmp/etc/gres.conf"

slurmctld -D -f "$SLURM_CONF" >"$tmp/log/slurmctld.out.log" 2>&1 &
ctld_pid=$!
node_idle() {
    [ "$(sinfo -h -n "$node" -o %T 2>/dev/null)" = idle ]
}
ctld_up() { scontrol ping >/dev/null 2>&1; }
wait_for 30 ctld_up || fail "slurmctld did not answer"
slurmd -D -N "$node" -f "$SLURM_CONF" >"$tmp/log/slurmd.out.log" 2>&1 &
slurmd_pid=$!
wait_for 30 node_idle || fail "node $node did not become idle: $(sinfo -h -o '%T %E' 2>&1)"
[ "$(sinfo -h -n "$node" -o %G)" = "${node_gres#Gres=}" ] ||
    fail "the node's GRES are $(sinfo -h -n "$node" -o %G), expected ${node_gres#Gres=}"
echo "test-slurm: munged, slurmctld (port $ctld_port), slurmd (port $slurmd_port) and two tenferrod up" \
    "in $(($(date +%s) - started)) s; node $node has $(sinfo -h -n "$node" -o %G)"

# ---- helpers over jobs and daemons ----
# Submits a batch job: $1 the output's name under $tmp/out, the rest sbatch's arguments.
submit() {
    sb_name=$1
    shift
    sbatch --parsable --chdir="$tmp" --output="$tmp/out/$sb_name.out" "$@" | cut -d';' -f1
}
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
job_reason() { scontrol show job "$1" 2>/dev/null | sed -n 's/.* Reason=\([^ ]*\).*/\1/p'; }
job_is() { [ "$(job_state "$1")" = "$2" ]; }
# True when file $1 has at least $3 lines matching the regular expression $2.
has_lines() {
    hl_n=$(grep -c -e "$2" "$1" 2>/dev/null) || hl_n=0
    [ "$hl_n" -ge "$3" ]
}
# The value of KEY=value word $2 on the first line of $1 matching $3.
word() { grep -e "$3" "$1" | head -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
status_json() { "$ctl" --socket "$tmp/run/tenferrod-$1.sock" status --json; }
# A number from daemon $1's status --json: the first "$2":N.
number() { status_json "$1" | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2; }
# The pids of daemon $1's clients.
client_pids() { status_json "$1" | grep -o '"id":[0-9]*,"pid":[0-9]*' | sed 's/.*"pid"://'; }
# Daemon $1 at its baseline: only the status request's own connection, no tensor or pinned
# byte, the domain free with nobody queued.
at_baseline() {
    ab_s=$(status_json "$1") || return 1
    [ "$(printf '%s' "$ab_s" | grep -o '"id":[0-9]*,"pid"' | wc -l)" -eq 1 ] &&
        printf '%s' "$ab_s" | grep -q '"device_bytes_live":0,' &&
        printf '%s' "$ab_s" | grep -q '"pinned_bytes_live":0,' &&
        printf '%s' "$ab_s" | grep -q '"holder_client_id":null' &&
        printf '%s' "$ab_s" | grep -q '"queued":\[\]'
}
other() { if [ "$1" = 0 ]; then echo 1; else echo 0; fi; }
# A job that holds its shares and prints the GPUs they are on.
# shellcheck disable=SC2016 # expanded in the job
filler='echo "FILLER gpus=$SLURM_JOB_GPUS"; exec sleep 300'


for d in 0 1; do at_baseline "$d" || fail "tenferrod $d is not at its baseline before the jobs"; done

# ---- (a) each task gets the socket of its share's daemon ----
t0=$(date +%s)
job_a=$(submit a --gres=shard:4 -n 2 \
    --wrap "$client report 0; srun $client report 4000")
wait_for 30 job_is "$job_a" RUNNING || fail "job $job_a (shard:4) did not start"
srun --chdir="$tmp" --gres=shard:4 -n 2 "$client" report 4000 >"$tmp/out/b.out" 2>&1 &
srun_pid=$!
wait_for 30 has_lines "$tmp/out/a.out" '^REPORT .* step=0 ' 2 ||
    fail "the tasks of job $job_a's step did not report"
wait_for 30 has_lines "$tmp/out/b.out" '^REPORT ' 2 || fail "the srun job's tasks did not report"
# Both jobs' step tasks are connected now (they stay 4 s): ask both daemons for their clients.
pids0=$(client_pids 0 | tr '\n' ' ')
pids1=$(client_pids 1 | tr '\n' ' ')
dev_a=$(word "$tmp/out/a.out" device '^REPORT .* step=0 ')
dev_b=$(word "$tmp/out/b.out" device '^REPORT ')
case $dev_a$dev_b in 01 | 10) ;; *) fail "jobs with a whole GPU's shares each got devices $dev_a and $dev_b" ;; esac
# Checks the REPORT lines of output $1 (there must be $3) against the job's device $2.
check_reports() {
    [ "$(grep -c '^REPORT ' "$1")" -eq "$3" ] || fail "$1 has $(grep -c '^REPORT ' "$1") reports, expected $3"
    if [ "$2" = 0 ]; then cr_on=$pids0 cr_off=$pids1; else cr_on=$pids1 cr_off=$pids0; fi
    while read -r cr_line; do
        case " $cr_line " in
        *" gpus=$2 device=$2 socket=$tmp/run/tenferrod-$2.sock "*) ;;
        *) fail "a task of GPU $2 reported: $cr_line" ;;
        esac
        # The batch script's client has already left; each step task is still connected.
        case $cr_line in *" step=batch "*) continue ;; esac
        cr_pid=${cr_line##*pid=}
        case " $cr_on " in *" $cr_pid "*) ;; *) fail "tenferrod $2 does not list task pid $cr_pid ($cr_line); it has: $cr_on" ;; esac
        case " $cr_off " in *" $cr_pid "*) fail "the other daemon lists task pid $cr_pid too" ;; esac
    done <<EOF
$(grep '^REPORT ' "$1")
EOF
}
check_reports "$tmp/out/a.out" "$dev_a" 3
check_reports "$tmp/out/b.out" "$dev_b" 2
grep -q '^REPORT .* step=batch ' "$tmp/out/a.out" || fail "job $job_a's batch script did not report"
wait "$srun_pid" || fail "srun --gres=shard:4 -n 2 exited non-zero"
srun_pid=""
wait_for 30 job_is "$job_a" COMPLETED || fail "job $job_a did not complete: $(job_state "$job_a")"
echo "test-slurm: (a) job $job_a (sbatch, its batch script and 2 tasks of a step) on tenferrod $dev_a," \
    "the srun job's 2 tasks on tenferrod $dev_b; each daemon listed its own tasks: ok ($(($(date +%s) - t0)) s)"

# ---- (b) two jobs on one GPU's shares contend as the daemon's policy says ----
t0=$(date +%s)
# A job that takes one GPU's four shares leaves only the other GPU's to the two that contend.
job_f=$(submit f --gres=shard:4 --wrap "$filler")
wait_for 30 has_lines "$tmp/out/f.out" '^FILLER ' 1 || fail "the filler job $job_f did not start"
dev_f=$(word "$tmp/out/f.out" gpus '^FILLER ')
dev_w=$(other "$dev_f")
# The first holds its session until the test lets go (or 60 s pass).
job_h1=$(submit h1 --gres=shard:1 --wrap "$client hold 60000 $tmp/release-h1")
wait_for 30 has_lines "$tmp/out/h1.out" '^HELD ' 1 || fail "job $job_h1 did not get its held session"
queued_before=$(number "$dev_w" admissions_queued)
job_h2=$(submit h2 --gres=shard:1 --wrap "$client hold 200")
h2_queued() { status_json "$dev_w" | grep -q '"queued":\[[0-9]'; }
wait_for 30 h2_queued || fail "tenferrod $dev_w never listed job $job_h2's open as queued"
if ! job_is "$job_h1" RUNNING || ! job_is "$job_h2" RUNNING; then
    fail "jobs $job_h1 and $job_h2 were not running together"
fi
sleep 1
if has_lines "$tmp/out/h2.out" '^OPEN ' 1; then
    fail "job $job_h2's open returned while $job_h1 held the domain: $(grep '^OPEN ' "$tmp/out/h2.out")"
fi
touch "$tmp/release-h1"
wait_for 30 has_lines "$tmp/out/h2.out" '^CLOSED ' 1 || fail "job $job_h2 did not close its session"
for j in h1 h2; do
    [ "$(word "$tmp/out/$j.out" device '^OPEN ')" = "$dev_w" ] ||
        fail "job $j used tenferrod $(word "$tmp/out/$j.out" device '^OPEN '), expected $dev_w"
    [ "$(word "$tmp/out/$j.out" status '^OPEN ')" = TF_OK ] || fail "job $j: $(grep '^OPEN ' "$tmp/out/$j.out")"
done
waited=$(word "$tmp/out/h2.out" waited_ms '^OPEN ')
[ "$waited" -ge 1000 ] || fail "job $job_h2's open waited $waited ms, though it was queued for more than 1 s"
[ "$(number "$dev_w" admissions_queued)" -eq $((queued_before + 1)) ] ||
    fail "tenferrod $dev_w's admissions_queued did not go up by one"
echo "test-slurm: (b) policy wait: jobs $job_h1 and $job_h2 on shares of GPU $dev_w; $job_h2's open" \
    "queued $waited ms behind $job_h1's held session, then admitted: ok"

sed -i 's/^policy = wait/policy = reject/' "$tmp/etc/tenferrod.conf"
for d in 0 1; do
    eval "kill -HUP \$daemon${d}_pid"
    reloaded() { [ "$(grep -c 'configuration reloaded' "$tmp/log/tenferrod-$d.log")" -ge 1 ]; }
    wait_for 10 reloaded || fail "tenferrod $d did not reload"
done
status_json "$dev_w" | grep -q '"policy":"reject"' || fail "tenferrod $dev_w's policy is not reject after the reload"
job_h3=$(submit h3 --gres=shard:1 --wrap "$client hold 60000 $tmp/release-h3")
wait_for 30 has_lines "$tmp/out/h3.out" '^HELD ' 1 || fail "job $job_h3 did not get its held session"
job_h4=$(submit h4 --gres=shard:1 --wrap "$client hold 200")
wait_for 30 has_lines "$tmp/out/h4.out" '^OPEN ' 1 || fail "job $job_h4 did not try to open"
line=$(grep '^OPEN ' "$tmp/out/h4.out")
case $line in
*" device=$dev_w status=TF_ERR_CONTENDED "*"held by"*) ;;
*) fail "job $job_h4 under policy reject: $line" ;;
esac
touch "$tmp/release-h3"
wait_for 30 has_lines "$tmp/out/h3.out" '^CLOSED ' 1 || fail "job $job_h3 did not close its session"
scancel "$job_f"
wait_for 30 job_is "$job_f" CANCELLED || fail "the filler job $job_f was not cancelled"
echo "test-slurm: (b) policy reject (after a reload): job $job_h4's open failed at once with" \
    "TF_ERR_CONTENDED while $job_h3 held GPU $dev_w: ok ($(($(date +%s) - t0)) s)"

# ---- (c) scancel, then the Epilog brings the daemon back to its baseline ----
t0=$(date +%s)
wait_for 20 at_baseline 0 || fail "tenferrod 0 is not at its baseline before (c)"
wait_for 20 at_baseline 1 || fail "tenferrod 1 is not at its baseline before (c)"
cat >"$tmp/etc/left-behind.sh" <<EOF
#!/bin/sh
# One client leaves the job's process tree (Slurm's proctrack/linuxproc loses it) with a
# held session and 4 MiB; the other stays in the job.
echo "JOB gpus=\$SLURM_JOB_GPUS"
setsid -f $client linger held >$tmp/out/c-escaped.out 2>&1 </dev/null
exec $client linger
EOF
terminated_before=$(($(number 0 clients_terminated) + $(number 1 clients_terminated)))
job_c=$(submit c --gres=shard:1 "$tmp/etc/left-behind.sh")
wait_for 30 has_lines "$tmp/out/c.out" '^READY ' 1 || fail "job $job_c's client did not start"
wait_for 30 has_lines "$tmp/out/c-escaped.out" '^READY ' 1 || fail "job $job_c's escaped client did not start"
dev_c=$(word "$tmp/out/c.out" gpus '^JOB ')
escaped_pid=$(word "$tmp/out/c-escaped.out" pid '^READY ')
escaped_id=$(word "$tmp/out/c-escaped.out" client '^READY ')
c_status=$(status_json "$dev_c")
printf '%s' "$c_status" | grep -q "\"holder_client_id\":$escaped_id," ||
    fail "tenferrod $dev_c does not show client $escaped_id holding the domain"
[ "$(printf '%s' "$c_status" | grep -o '"device_bytes_live":[0-9]*' | cut -d: -f2)" -ge $((8 << 20)) ] ||
    fail "tenferrod $dev_c holds less than the two clients' 8 MiB"
scancel "$job_c"
wait_for 30 job_is "$job_c" CANCELLED || fail "job $job_c was not cancelled: $(job_state "$job_c")"
epilog_done() { grep -q "job $job_c: done" "$tmp/log/epilog.log" 2>/dev/null; }
wait_for 30 epilog_done || fail "the Epilog of job $job_c did not run"
wait_for 10 at_baseline "$dev_c" ||
    fail "tenferrod $dev_c is not back at its baseline after job $job_c's Epilog: $(status_json "$dev_c")"
grep -q "job $job_c: .*terminated client $escaped_id (pid $escaped_pid" "$tmp/log/epilog.log" ||
    fail "the Epilog did not terminate the escaped client $escaped_id"
wait_for 10 has_lines "$tmp/out/c-escaped.out" '^LOST ' 1 || fail "the escaped client did not see its end"
case $(grep '^LOST ' "$tmp/out/c-escaped.out") in
*"status=TF_ERR_DISCONNECTED "*"terminated by an administrator"*) ;;
*) fail "the escaped client saw: $(grep '^LOST ' "$tmp/out/c-escaped.out")" ;;
esac
escaped_gone() { ! kill -0 "$escaped_pid" 2>/dev/null; }
wait_for 10 escaped_gone || fail "the escaped client $escaped_pid is still running"
terminated_after=$(($(number 0 clients_terminated) + $(number 1 clients_terminated)))
[ "$terminated_after" -eq $((terminated_before + 1)) ] ||
    fail "clients_terminated went from $terminated_before to $terminated_after, expected one more"
sed -n "s/^/test-slurm: (c) the Epilog's log: /; /job $job_c: /p" "$tmp/log/epilog.log"
echo "test-slurm: (c) scancel $job_c: Slurm killed the client in the job, the Epilog terminated the" \
    "one that left it (client $escaped_id, its held session and 4 MiB); tenferrod $dev_c at baseline: ok" \
    "($(($(date +%s) - t0)) s)"

# ---- (d) more shares than exist ----
t0=$(date +%s)
if out=$(sbatch --parsable --chdir="$tmp" --gres=shard:9 --wrap true 2>&1); then
    fail "sbatch --gres=shard:9 on a node with 8 shares was accepted (job $out)"
fi
case $out in *"Requested node configuration is not available"*) ;; *) fail "sbatch --gres=shard:9: $out" ;; esac
job_p0=$(submit p0 --gres=shard:4 --wrap "$filler")
job_p1=$(submit p1 --gres=shard:4 --wrap "$filler")
wait_for 30 has_lines "$tmp/out/p0.out" '^FILLER ' 1 || fail "job $job_p0 did not start"
wait_for 30 has_lines "$tmp/out/p1.out" '^FILLER ' 1 || fail "job $job_p1 did not start"
job_q=$(submit q --gres=shard:1 --wrap "$client report 0")
sleep 3
if [ "$(job_state "$job_q")" != PENDING ] || [ "$(job_reason "$job_q")" != Resources ]; then
    fail "job $job_q (shard:1, every share taken) is $(job_state "$job_q") ($(job_reason "$job_q"))"
fi
freed=$(word "$tmp/out/p1.out" gpus '^FILLER ')
scancel "$job_p1"
wait_for 60 job_is "$job_q" COMPLETED || fail "job $job_q did not run once $job_p1 left: $(job_state "$job_q")"
[ "$(word "$tmp/out/q.out" device '^REPORT ')" = "$freed" ] ||
    fail "job $job_q ran on tenferrod $(word "$tmp/out/q.out" device '^REPORT '), not on the freed GPU $freed"
scancel "$job_p0"
wait_for 30 job_is "$job_p0" CANCELLED || fail "job $job_p0 was not cancelled"
job_r=$(submit r --gres=shard:5 --wrap true)
sleep 3
if [ "$(job_state "$job_r")" != PENDING ] || [ "$(job_reason "$job_r")" != Resources ]; then
    fail "job $job_r (shard:5, more than one GPU's 4) is $(job_state "$job_r") ($(job_reason "$job_r"))"
fi
[ -z "$(squeue -h -t RUNNING -o %i)" ] || fail "a job is running while $job_r pends: $(squeue -h -t RUNNING)"
scancel "$job_r"
echo "test-slurm: (d) shard:9 refused at submission; shard:1 pended (Resources) while all 8 were taken" \
    "and ran on GPU $freed once its job left; shard:5 pends on an idle node: ok ($(($(date +%s) - t0)) s)"

# ---- (e) no GRES: TENFERRO_SOCKET unset, and the client says so ----
t0=$(date +%s)
rc=0
TENFERRO_SOCKET=/nonexistent/inherited.sock srun --chdir="$tmp" -n 1 "$client" report 0 \
    >"$tmp/out/e.out" 2>&1 || rc=$?
line=$(grep '^CONNECT-FAILED ' "$tmp/out/e.out" || true)
[ -n "$line" ] || fail "a task without GRES connected or failed otherwise (exit $rc)"
case $line in *inherited.sock*) fail "the task kept the TENFERRO_SOCKET of the submitting shell: $line" ;; esac
if [ -e /run/tenferro/tenferrod-0.sock ] || [ -e /run/tenferro/tenferrod-cpu.sock ]; then
    echo "test-slurm: (e) a default socket exists on this machine; the message for none is not checked"
else
    case $line in
    *"TENFERRO_SOCKET is not set"*/run/tenferro/tenferrod-0.sock*/run/tenferro/tenferrod-cpu.sock*) ;;
    *) fail "a task without GRES got: $line" ;;
    esac
fi
echo "test-slurm: (e) a task without GRES: ${line#CONNECT-FAILED }: ok ($(($(date +%s) - t0)) s)"

for d in 0 1; do
    wait_for 10 at_baseline "$d" || fail "tenferrod $d is not at its baseline at the end: $(status_json "$d")"
done
echo "test-slurm: all checks passed in $(($(date +%s) - started)) s; stopping the cluster"
