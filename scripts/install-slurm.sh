#!/usr/bin/env bash
# Installs Slurm (slurm-wlm: slurmctld, slurmd, sbatch, ...) and MUNGE from
# the Debian package mirror so the Slurm tests can run a real single-node
# cluster (see scripts/slurm.sh).
#
#   scripts/install-slurm.sh
#
# Idempotent: exits at once when slurmctld, slurmd, sbatch and munged are
# already installed. Always makes sure /etc/munge/munge.key exists
# (owner munge, mode 0400).
set -euo pipefail

SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
fi

have() {
    command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]
}

ensure_munge_key() {
    local key=/etc/munge/munge.key
    if "${SUDO[@]}" test -s "$key"; then
        return 0
    fi
    echo "install-slurm: creating $key" >&2
    "${SUDO[@]}" mkdir -p /etc/munge
    if have mungekey; then
        local mk
        mk=$(command -v mungekey 2>/dev/null || echo /usr/sbin/mungekey)
        "${SUDO[@]}" "$mk" --create --keyfile="$key" --force >/dev/null
    else
        "${SUDO[@]}" dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
    fi
    "${SUDO[@]}" chown munge:munge "$key"
    "${SUDO[@]}" chmod 0400 "$key"
}

if have slurmctld && have slurmd && have sbatch && have munged; then
    echo "install-slurm: slurmctld, slurmd, sbatch and munged already installed" >&2
    ensure_munge_key
    exit 0
fi

start=$SECONDS
echo "install-slurm: installing slurm-wlm and munge with apt-get" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { "${SUDO[@]}" apt-get update -qq &&
       "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
           apt-get install -y -qq --no-install-recommends slurm-wlm munge; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "install-slurm: apt-get failed" >&2
    exit 1
fi
ensure_munge_key
echo "install-slurm: installed in $((SECONDS - start)) s" >&2
