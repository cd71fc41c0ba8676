#!/usr/bin/env bash
# A real single-node Slurm on this (Debian) machine, for testing slurm/ray_sweep.sbatch.
# Follows ../shared/slurm-local.md (Debian 12, Slurm 22.05): munge as its own user, a config in a
# scratch folder, slurmctld + slurmd as root. Needs root; installs the packages if missing.
#
#   slurm/local_slurm.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf` on stdout
#   slurm/local_slurm.sh stop DIR    # stops the daemons this script started from DIR
#   slurm/local_slurm.sh status DIR  # sinfo of the local cluster
#
# Environment: LOCAL_SLURM_CPUS (default: nproc), LOCAL_SLURM_MEM_MB (default: 20000, or 90% of
# the machine's memory when that is less), LOCAL_SLURM_WAIT_S (default 60: wait for the node idle),
# LOCAL_SLURM_CONF_EXTRA (lines appended to the config; e.g. "MinJobAge=10": `sbatch --wait` then
# polls every 8 s instead of backing off to 32 s).
# Everything stays on this machine: SlurmctldHost is this host's short name.
set -euo pipefail

log() { echo "local_slurm: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() { die "usage: $0 start|stop|status DIR"; }

[[ $# -eq 2 ]] || usage
cmd=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
conf=$dir/slurm.conf
host=$(hostname -s)

[[ $EUID -eq 0 ]] || die "must run as root (slurmd, slurmctld and munged are started as daemons)"

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() { # stop the daemon whose pid is in $1: SIGTERM, then SIGKILL after 10 s
    local pidfile=$1 pid
    alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
}

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sbatch >/dev/null && command -v munged >/dev/null; then
        return 0
    fi
    command -v apt-get >/dev/null || die "Slurm is not installed and apt-get is not available"
    log "installing slurmctld slurmd slurm-client munge with apt-get"
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurmctld slurmd slurm-client munge >&2
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_works; then
        log "munged already running; using it"
        return 0
    fi
    [[ -f /etc/munge/munge.key ]] || {
        log "creating /etc/munge/munge.key"
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 600 /etc/munge/munge.key
    }
    mkdir -p /run/munge
    chown munge:munge /run/munge
    su -s /bin/sh munge -c /usr/sbin/munged
    for _ in $(seq 50); do
        munge_works && break
        sleep 0.2
    done
    munge_works || die "munged did not come up (see /var/log/munge/munged.log)"
    cp /run/munge/munged.pid "$dir/munged.pid" # ours: `stop` stops it
}

write_config() {
    local cpus=${LOCAL_SLURM_CPUS:-$(nproc)} mem=${LOCAL_SLURM_MEM_MB:-}
    if [[ -z $mem ]]; then
        mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
        ((mem > 20000)) && mem=20000
    fi
    mkdir -p "$dir/spool" "$dir/state"
    cat >"$conf" <<EOF
ClusterName=local
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmdSpoolDir=$dir/spool
StateSaveLocation=$dir/state
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    if [[ -n ${LOCAL_SLURM_CONF_EXTRA:-} ]]; then
        printf '%s\n' "$LOCAL_SLURM_CONF_EXTRA" >>"$conf"
    fi
}

wait_idle() {
    local limit=${LOCAL_SLURM_WAIT_S:-60} state=""
    for _ in $(seq $((limit * 2))); do
        state=$(SLURM_CONF=$conf sinfo -h -N -n "$host" -o %t 2>/dev/null || true)
        [[ $state == idle ]] && return 0
        sleep 0.5
    done
    log "node $host is '${state:-unknown}', not idle, after ${limit}s"
    SLURM_CONF=$conf sinfo -R >&2 || true
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    return 1
}

case $cmd in
start)
    alive "$dir/slurmctld.pid" && die "already running from $dir (run: $0 stop $dir)"
    pgrep -x slurmctld >/dev/null && die "another slurmctld runs on this machine: $(pgrep -ax slurmctld)"
    pgrep -x slurmd >/dev/null && die "another slurmd runs on this machine: $(pgrep -ax slurmd)"
    install_packages
    start_munge
    write_config
    slurmctld -f "$conf"
    slurmd -f "$conf"
    if ! wait_idle; then
        stop_pidfile "$dir/slurmd.pid"
        stop_pidfile "$dir/slurmctld.pid"
        die "the local Slurm did not start; logs in $dir"
    fi
    log "node $host idle; partition 'debug'; config $conf"
    echo "export SLURM_CONF=$conf"
    ;;
stop)
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    if [[ -f $dir/munged.pid ]]; then
        stop_pidfile "$dir/munged.pid"
        rm -f "$dir/munged.pid"
    fi
    log "stopped (logs in $dir)"
    ;;
status)
    SLURM_CONF=$conf sinfo
    ;;
*) usage ;;
esac
