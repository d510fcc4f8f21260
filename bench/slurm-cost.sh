#!/usr/bin/env bash
# The cost of --executor slurm (docs/cluster.md): the wall time of
# `reproduce --quick --kernels auto` through a single-node Slurm on this
# machine (2 CPUs: two tasks at once) against the local `--jobs 2`, both
# storing into a throwaway PostgreSQL, alternated (local, slurm, local, ...)
# so that machine drift falls on both alike. The issue's budget: the Slurm
# path within 15% of the local one.
#
# usage: bench/slurm-cost.sh [PAIRS]   (as root, with ./setup's postgresql,
#        slurm-wlm and munge, QEMU, and the kernels of --kernels auto cached;
#        nothing else may be timing guests on the machine meanwhile)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-2}
[ "$(id -u)" = 0 ] || { echo "slurm-cost: slurmd needs root" >&2; exit 1; }
cargo build --release -q
P=$PWD/target/release/ptelab
WORK=$(mktemp -d /tmp/ptelab-slurm-cost.XXXXXX)
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cleanup() {
    for f in slurmd slurmctld munged; do
        [ -f "$WORK/$f.pid" ] && kill "$(cat "$WORK/$f.pid")" 2>/dev/null || true
    done
    [ -f "$WORK/pgdir/pg/postmaster.pid" ] &&
        runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pgdir/pg" -m immediate -w stop >/dev/null || true
    sleep 1
    rm -rf "$WORK"
}
trap cleanup EXIT

# PostgreSQL, as the postgres user, on a free port.
chmod 755 "$WORK"
mkdir "$WORK/pgdir"
chown postgres: "$WORK/pgdir"
PGPORT=$(free_port)
runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/pgdir/pg" -U ptelab --auth=trust -E UTF8 \
    --no-sync >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/pgdir/pg" -l "$WORK/pgdir/log" -w start \
    -o "-p $PGPORT -k $WORK/pgdir -c listen_addresses=127.0.0.1" >/dev/null
DB=postgres://ptelab@127.0.0.1:$PGPORT/postgres

# munge and a single-node Slurm with 2 CPUs.
mkdir -p "$WORK/state" "$WORK/spool"
mungekey -c -k "$WORK/munge.key"
munged --force --socket="$WORK/munge.sock" --key-file="$WORK/munge.key" \
    --log-file="$WORK/munged.log" --pid-file="$WORK/munged.pid" --seed-file="$WORK/munged.seed"
cat >"$WORK/slurm.conf" <<EOF
ClusterName=ptelabcost
SlurmctldHost=localhost
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$WORK/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=3600
SchedulerParameters=sched_interval=1
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=cost Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$WORK/slurm.conf
slurmctld -c
slurmd -N localhost
for _ in $(seq 120); do [ "$(sinfo -h -o %T)" = idle ] && break; sleep 0.5; done
[ "$(sinfo -h -o %T)" = idle ] || { echo "slurm-cost: the node did not come up" >&2; exit 1; }

run() { # mode -> seconds
    local flags=(--jobs 2)
    [ "$1" = slurm ] && flags=(--executor slurm)
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$WORK" && "$P" reproduce --quick --kernels auto "${flags[@]}" --db "$DB" \
        -o "$WORK/report.html" >"$WORK/$1.out" 2>"$WORK/$1.err") ||
        { echo "slurm-cost: the $1 run failed:" >&2; tail -20 "$WORK/$1.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.1f}')"
}

for i in $(seq "$PAIRS"); do
    for mode in local slurm; do
        echo "$mode $(run "$mode")" | tee -a "$WORK/all"
    done
done
python3 - "$WORK/all" <<'PY'
import sys, statistics
rows = {"local": [], "slurm": []}
for line in open(sys.argv[1]):
    mode, secs = line.split()
    rows[mode].append(float(secs))
l, s = statistics.median(rows["local"]), statistics.median(rows["slurm"])
print(f"local --jobs 2: {l:.1f} s, --executor slurm: {s:.1f} s (medians of {len(rows['local'])}): "
      f"slurm/local = {s / l:.3f}")
PY
