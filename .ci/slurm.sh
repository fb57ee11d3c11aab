#!/usr/bin/env bash
# Installs (Debian packages) and starts a single-node Slurm for the launch tests, without systemd
# or cgroups: munge, MariaDB, slurmdbd and one cluster with accounting (/etc/slurm/slurm.conf, the
# default sbatch reads), plus a second cluster on other ports without accounting (what many small
# sites run: sacct then fails). Idempotent: what already answers is left running. Prints the
# exports the tests read (`eval "$(bash .ci/slurm.sh)"`). Stop: `bash .ci/slurm.sh stop`.
set -euo pipefail
NOACCT=/etc/slurm-noaccounting
pids() { cat /run/slurm*/*.pid /run/munge/munged.pid /run/mysqld/mysqld.pid 2>/dev/null || true; }
if [[ "${1:-}" == stop ]]; then
  for pid in $(pids); do kill "$pid" 2>/dev/null || true; done
  exit 0
fi

packages=()
command -v slurmctld >/dev/null || packages+=(slurmctld slurmd slurm-client munge)
command -v slurmdbd >/dev/null || packages+=(slurmdbd)
command -v mariadbd >/dev/null || packages+=(mariadb-server)
if ((${#packages[@]})); then
  export DEBIAN_FRONTEND=noninteractive  # the packages' own service starts are refused without systemd
  (apt-get install -y -q "${packages[@]}" || (apt-get update -q && apt-get install -y -q "${packages[@]}")) >&2
fi

wait_for() {  # wait_for WHAT COMMAND...: up to 30 s, else say which daemon did not answer
  local what=$1
  shift
  for _ in $(seq 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "slurm.sh: $what did not start (logs: /var/log/slurm/, /var/log/mysql/)" >&2
  return 1
}

install -d -o munge -g munge -m 0755 /run/munge
[[ -s /etc/munge/munge.key ]] || runuser -u munge -- mungekey --create >&2
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged >&2
  wait_for munged sh -c 'munge -n | unmunge'
fi

install -d -o mysql -g mysql /run/mysqld
if ! mysqladmin ping >/dev/null 2>&1; then
  setsid /usr/bin/mysqld_safe --user=mysql --skip-syslog >/dev/null 2>&1 < /dev/null &
  wait_for MariaDB mysqladmin ping
fi
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

host=$(hostname -s)
cpus=$(nproc)
memory=$(($(free -m | awk '/^Mem:/ {print $2}') * 9 / 10))  # a margin for the daemons and the launcher
install -d -o slurm -g slurm /run/slurm /var/log/slurm /var/lib/slurm/slurmctld /var/lib/slurm/noacct
install -d /var/lib/slurm/slurmd /var/lib/slurm/slurmd-noacct "$NOACCT"

# cluster NAME CONF_DIR CTLD_PORT SLURMD_PORT STATE SPOOL ACCOUNTING...: writes one slurm.conf
cluster() {
  local name=$1 dir=$2 ctld=$3 slurmd=$4 state=$5 spool=$6
  shift 6
  cat > "$dir/slurm.conf.new" <<EOF
ClusterName=$name
SlurmctldHost=$host
SlurmUser=slurm
SlurmctldPort=$ctld
SlurmdPort=$slurmd
StateSaveLocation=$state
SlurmdSpoolDir=$spool
SlurmctldPidFile=/run/slurm/slurmctld-$name.pid
SlurmdPidFile=/run/slurm/slurmd-$name.pid
SlurmctldLogFile=/var/log/slurm/slurmctld-$name.log
SlurmdLogFile=/var/log/slurm/slurmd-$name.log
AuthType=auth/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
KillWait=10
MinJobAge=30
DefMemPerCPU=$((memory / cpus))
$(printf '%s\n' "$@")
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  # a daemon reads its file when it starts: a changed file means a restart (below)
  if cmp -s "$dir/slurm.conf.new" "$dir/slurm.conf"; then rm "$dir/slurm.conf.new"; return 1; fi
  mv "$dir/slurm.conf.new" "$dir/slurm.conf"
}

main=0 noacct=0  # sacctmgr reads slurm.conf: both are written before slurmdbd starts
cluster suite /etc/slurm 6817 6818 /var/lib/slurm/slurmctld /var/lib/slurm/slurmd \
  AccountingStorageType=accounting_storage/slurmdbd AccountingStorageHost=localhost && main=1
cluster noacct "$NOACCT" 6827 6828 /var/lib/slurm/noacct /var/lib/slurm/slurmd-noacct \
  AccountingStorageType=accounting_storage/none && noacct=1

cat > /etc/slurm/slurmdbd.conf.new <<EOF
DbdHost=localhost
SlurmUser=slurm
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=/run/slurm/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
EOF
mv /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
chown slurm:slurm /etc/slurm/slurmdbd.conf && chmod 600 /etc/slurm/slurmdbd.conf
if ! sacctmgr -n show cluster >/dev/null 2>&1; then
  /usr/sbin/slurmdbd >&2
  wait_for slurmdbd sacctmgr -n show cluster
fi

running() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
# start NAME CONF: its slurmctld and slurmd, restarted when the file changed (`changed`)
start() {
  local name=$1 conf=$2 changed=$3
  for daemon in slurmctld slurmd; do
    local pidfile=/run/slurm/$daemon-$name.pid
    if running "$pidfile" && ((changed)); then
      kill "$(cat "$pidfile")"
      for _ in $(seq 40); do running "$pidfile" || break; sleep 0.25; done  # it saves its state first
    fi
    running "$pidfile" || SLURM_CONF=$conf "/usr/sbin/$daemon" >&2
  done
  wait_for "slurmctld ($conf)" env SLURM_CONF="$conf" scontrol ping
  SLURM_CONF=$conf scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  wait_for "slurmd ($conf)" env SLURM_CONF="$conf" sh -c "sinfo -h -N -o %t | grep -qE '^(idle|mix|alloc)'"
}

start suite /etc/slurm/slurm.conf $main
start noacct "$NOACCT/slurm.conf" $noacct

echo "export SUITE_TEST_SLURM_CONF=/etc/slurm/slurm.conf"
echo "export SUITE_TEST_SLURM_NOACCT_CONF=$NOACCT/slurm.conf"
