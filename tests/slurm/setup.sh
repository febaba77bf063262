#!/usr/bin/env bash
# Single-node SLURM on this machine for the tests: munged, slurmctld and slurmd, with a
# slurm.conf of our own (no cgroups: proctrack/linuxproc, task/none), so it also runs in
# containers and never touches /etc/slurm.
#
#   tests/slurm/setup.sh up DIR     install if missing (root + apt-get), start, wait for an idle
#                                   node and an answering `srun hostname`; last line: SLURM_CONF=...
#   tests/slurm/setup.sh down DIR   stop the two SLURM daemons started from DIR
#
# Exit 0: up. Exit 3: cannot run here (the reason is printed); the tests skip on it.
set -uo pipefail

cmd=${1:?usage: setup.sh up|down DIR}
dir=${2:?usage: setup.sh up|down DIR}
conf=$dir/slurm.conf
export SLURM_CONF=$conf

cannot() { echo "cannot bring up SLURM: $*"; exit 3; }

stop_daemons() {
    for d in slurmd slurmctld; do
        [ -f "$dir/$d.pid" ] && kill "$(cat "$dir/$d.pid")" 2>/dev/null
        rm -f "$dir/$d.pid"
    done
    return 0
}

if [ "$cmd" = down ]; then stop_daemons; exit 0; fi
[ "$cmd" = up ] || cannot "unknown command $cmd (up or down)"

have_all() {
    for exe in slurmctld slurmd sbatch squeue scancel sinfo srun munged; do
        command -v "$exe" >/dev/null || PATH=$PATH:/usr/sbin command -v "$exe" >/dev/null || return 1
    done
}
export PATH=$PATH:/usr/sbin
if ! have_all; then
    [ "$(id -u)" = 0 ] || cannot "slurm-wlm/munge are not installed and we are not root to install them"
    command -v apt-get >/dev/null || cannot "slurm-wlm/munge are not installed and there is no apt-get"
    echo "installing slurm-wlm and munge with apt-get"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends slurm-wlm munge; } >"${TMPDIR:-/tmp}/tdos-slurm-apt.log" 2>&1 \
        || cannot "apt-get install slurm-wlm munge failed (see ${TMPDIR:-/tmp}/tdos-slurm-apt.log)"
    have_all || cannot "slurm-wlm installed but its commands are still missing"
fi
[ "$(id -u)" = 0 ] || cannot "not root: slurmd must run as root to start jobs as their user"

# munge: the authentication every SLURM message carries; run as its own user, as Debian does
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    [ -f /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || \
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 2>/dev/null; }
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null
    chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
    runuser -u munge -- munged || munged --force || cannot "munged did not start"
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge >/dev/null 2>&1 || cannot "munge does not answer"
fi

# one node: this machine, as slurmd itself sees it (CPUs, RealMemory)
node_line=$(slurmd -C | head -1)
node=$(echo "$node_line" | sed 's/^NodeName=\([^ ]*\).*/\1/')
stop_daemons
# ports of our own, free now: a SLURM already running here (the site's, or another DIR's)
# keeps its 6817/6818 and is never talked to
read -r ctld_port slurmd_port < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*(x.getsockname()[1] for x in s))') || cannot "python3 is needed to pick free ports"
mkdir -p "$dir/state" "$dir/spool"
cat >"$conf" <<CONF
ClusterName=tdostest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# a job past its walltime is signalled at once and killed 5 s later (tests end jobs that way)
OverTimeLimit=0
KillWait=5
InactiveLimit=0
MinJobAge=300
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# -i: ignore state left by an earlier run in DIR (jobs, node states)
slurmctld -i || cannot "slurmctld did not start (see $dir/slurmctld.log)"
slurmd || cannot "slurmd did not start (see $dir/slurmd.log)"
for _ in $(seq 100); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || cannot "node $node is '${state:-unknown}', not idle (see $dir/*.log)"
for d in slurmctld slurmd; do
    kill -0 "$(cat "$dir/$d.pid" 2>/dev/null)" 2>/dev/null || cannot "$d exited (see $dir/$d.log)"
done
answer=$(timeout 60 srun -N1 -n1 hostname 2>&1) || cannot "srun hostname failed: $answer"
echo "SLURM up: node $node idle, srun hostname -> $answer"
echo "SLURM_CONF=$conf"
