#!/usr/bin/env bash
# A real single-node Slurm cluster on 127.0.0.1 for the Slurm tests.
#
#   scripts/slurm.sh start DIR   # install if needed, start munged, slurmctld, slurmd
#   scripts/slurm.sh stop DIR    # stop slurmd and slurmctld (munged keeps running)
#   scripts/slurm.sh env DIR     # print `export SLURM_CONF=DIR/slurm.conf`
#
# Everything the cluster writes lives under DIR: slurm.conf, state/, spool/,
# log/ (slurmctld.log, slurmd.log, jobcomp.txt) and the pid files. The ports
# are picked free at each start, so several clusters can coexist; the
# clients find them through SLURM_CONF. `start` ends by printing
# `export SLURM_CONF=DIR/slurm.conf` on stdout (everything else goes to
# stderr), so `eval "$(scripts/slurm.sh start DIR)"` works.
#
# The node declares 8 CPUs whatever the machine has (SlurmdParameters=
# config_overrides), so that several small jobs run while others queue.
# Needs root (or sudo): the daemons run as root and munged as munge.
#
# Latency: a batch job is not started at submit time but on slurmctld's next
# 1-second background tick, so `sbatch --wrap true` reaches COMPLETED in
# 0.1-1.0 s (0.5 s typical). sched_min_interval=0 / batch_sched_delay=0 do
# not change that. MailProg=/bin/true only silences "MailProg is invalid".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$PATH:/usr/sbin:/sbin"

SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
fi

log() { echo "slurm: $*" >&2; }

usage() {
    echo "usage: $0 start|stop|env DIR" >&2
    exit 2
}

[[ $# -eq 2 ]] || usage
cmd=$1
dir=$(realpath -m -- "$2")
conf="$dir/slurm.conf"

pid_alive() { # pid file
    local pid
    [[ -s "$1" ]] || return 1
    pid=$(<"$1")
    [[ "$pid" =~ ^[0-9]+$ ]] && running "$pid"
}

running() { # pid; a zombie does not count
    "${SUDO[@]}" kill -0 "$1" 2>/dev/null || return 1
    [[ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

ensure_munged() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0
    fi
    log "starting munged"
    "${SUDO[@]}" mkdir -p /run/munge
    "${SUDO[@]}" chown munge:munge /run/munge
    "${SUDO[@]}" chmod 0755 /run/munge
    if command -v runuser >/dev/null 2>&1; then
        "${SUDO[@]}" runuser -u munge -- /usr/sbin/munged
    else
        "${SUDO[@]}" su -s /bin/sh munge -c /usr/sbin/munged
    fi
    local i
    for i in $(seq 50); do
        if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    log "munged does not answer (munge -n | unmunge fails)"
    exit 1
}

free_ports() { # prints two distinct free TCP ports
    python3 - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

write_conf() {
    local host ports ctld_port slurmd_port mem_mb real_mem def_mem
    host=$(hostname -s)
    read -r ctld_port slurmd_port < <(free_ports)
    mem_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    # A bit under the total, as slurmd refuses a node that has less than it
    # declares (config_overrides aside), and leave room for the OS.
    real_mem=$((mem_mb * 9 / 10))
    def_mem=$((real_mem / 8))
    mkdir -p "$dir/state" "$dir/spool" "$dir/log"
    cat >"$conf" <<EOF
# Written by scripts/slurm.sh start $dir
ClusterName=pipeci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
DependencyParameters=kill_invalid_depend
MinJobAge=300
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1,bf_interval=1
MailProg=/bin/true
DefMemPerCPU=$def_mem
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

sinfo_state() {
    SLURM_CONF="$conf" timeout 10 sinfo -h -o %T 2>/dev/null || true
}

stop_daemons() { # name... ; slurmd and slurmctld take ~2 s each, so in parallel
    local name pidfile pid i pids=() names=()
    for name in "$@"; do
        pidfile="$dir/$name.pid"
        if pid_alive "$pidfile"; then
            pid=$(<"$pidfile")
            log "stopping $name ($pid)"
            "${SUDO[@]}" kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            names+=("$name")
        fi
    done
    for i in $(seq 50); do
        local left=0
        for pid in "${pids[@]}"; do
            running "$pid" && left=1
        done
        ((left)) || break
        sleep 0.1
    done
    for i in "${!pids[@]}"; do
        if running "${pids[$i]}"; then
            log "${names[$i]} (${pids[$i]}) still alive after 5 s, killing"
            "${SUDO[@]}" kill -KILL "${pids[$i]}" 2>/dev/null || true
        fi
    done
    for name in "$@"; do
        "${SUDO[@]}" rm -f "$dir/$name.pid"
    done
}

case "$cmd" in
start)
    "$here/install-slurm.sh"
    mkdir -p "$dir"
    ensure_munged
    # Up = slurmctld alive and its node answering (no `*`: not responding).
    if [[ -f "$conf" ]] && pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid" &&
        grep -qxE 'idle|mixed|allocated|completing' <<<"$(sinfo_state)"; then
        log "cluster in $dir already running ($(sinfo_state | tr '\n' ' '))"
        echo "export SLURM_CONF=$conf"
        exit 0
    fi
    # Leftovers of a half-started cluster.
    stop_daemons slurmd slurmctld
    # Without the saved node state the node stays UNKNOWN until this slurmd
    # registers, so the `idle` below really means slurmd is up (with it,
    # sinfo says idle at once). Jobs of an earlier run are kept.
    rm -f "$dir/state/node_state" "$dir/state/node_state.old"
    write_conf
    export SLURM_CONF="$conf"
    log "starting slurmctld and slurmd ($conf)"
    "${SUDO[@]}" env SLURM_CONF="$conf" slurmctld -f "$conf"
    "${SUDO[@]}" env SLURM_CONF="$conf" slurmd -f "$conf"
    start=$SECONDS
    while :; do
        state=$(sinfo_state)
        if grep -qx idle <<<"$state"; then
            break
        fi
        if ((SECONDS - start >= 30)); then
            log "node not idle after 30 s (sinfo: ${state:-no answer})"
            for f in slurmctld slurmd; do
                echo "--- $dir/log/$f.log (tail)" >&2
                tail -n 30 "$dir/log/$f.log" >&2 2>/dev/null || true
            done
            stop_daemons slurmd slurmctld
            exit 1
        fi
        sleep 0.2
    done
    log "cluster up in $dir after $((SECONDS - start)) s"
    echo "export SLURM_CONF=$conf"
    ;;
stop)
    stop_daemons slurmd slurmctld
    ;;
env)
    echo "export SLURM_CONF=$conf"
    ;;
*)
    usage
    ;;
esac
