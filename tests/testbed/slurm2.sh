#!/usr/bin/env bash
# Test bed component: a second SLURM cluster, SLURM 24.11 from Debian trixie, next to the
# 22.05 cluster of slurm.sh: its own root filesystem (built the way htcondor.sh builds the
# HTCondor pool's), its own sshd on 127.0.0.1:2225 for the user `batch`, its own cluster
# name, ports and accounting (slurmdbd on MariaDB inside the root filesystem).
#
# usage: slurm2.sh up|down|status|stop-slurmdbd|start-slurmdbd
#
#   up      install debootstrap if needed; build the trixie root filesystem once (cached
#           under $TESTBED_DIR/slurm2/rootfs, then reused) with munge, slurmctld, slurmd,
#           slurmdbd, slurm-client, mariadb-server and openssh-server in it; mount proc,
#           /dev and sysfs into it; create the user `batch` reached with the sshd
#           component's client key; start munged, mariadbd, slurmdbd, slurmctld, slurmd and
#           sshd inside (each only if not already working); create the cluster, account and
#           user in the accounting database; run a job as `batch` through ssh until sacct
#           says COMPLETED; write facts.json. Idempotent; quick when already up.
#   down    stop every process running in the root filesystem and unmount it. The root
#           filesystem (with the accounting database) is kept for the next `up`.
#   status  print whether it is up; exit 0 if up, 1 if not.
#   stop-slurmdbd, start-slurmdbd   stop or start slurmdbd alone (accounting goes away:
#           sacct fails, squeue/sbatch/scancel keep working).
#
# The two clusters share the host's network: every port differs from slurm.sh's
# (slurmctld 6827, slurmd 6828, slurmdbd 6829 here; 6817-6819 there). MariaDB listens on
# a socket inside the root filesystem only.
# Requires the sshd component (sshd.sh up) for the client key.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

SSH_HOST=127.0.0.1
SSH_PORT=2225
BATCH_USER="batch"
SUITE=trixie
MIRROR=http://deb.debian.org/debian

CLUSTER=batchbridge2
ACCOUNT=batchbridge
PARTITIONS=(debug single)
DEFAULT_PARTITION=debug
# What the refusal tests (batchbridge-slurm/tests/refusals.rs) change, used by no other
# test so that theirs never see it: a partition they drain and restore, a QOS and an
# account (association) that let the user have one job at a time.
DRAINABLE_PARTITION=drainable
# The preemption tests' pair (issue 30): a job in PREEMPTOR_PARTITION that needs the one
# PREEMPT_GRES a job in PREEMPTEE_PARTITION holds preempts that job, which SLURM requeues.
# Only jobs asking for that GRES contend for it, so the load of other tests neither
# provokes nor blocks the preemption; and only PREEMPTEE_PARTITION has a PriorityTier below
# the others', so no other partition's job can ever be preempted.
PREEMPTEE_PARTITION=preemptee
PREEMPTOR_PARTITION=preemptor
PREEMPT_GRES=preempt
LIMIT_QOS=onejob
LIMIT_ACCOUNT=onejob
# The capped drains' partition (submit limits hold jobs, issue 30): its partition QOS lets a
# user have CAPPED_MAX_SUBMIT jobs pending or running in it, so only jobs sent to it see
# the limit.
CAPPED_PARTITION=capped
CAPPED_QOS=capped
CAPPED_MAX_SUBMIT=10
NODE_CPUS=16
# As in slurm.sh: declared, not measured; 16 CPUs x DefMemPerCPU=1024 fit exactly.
NODE_MEMORY_MB=16384
# Its own node name: the node is the host, but this cluster's slurmd is told who it is.
NODE=slurm2node
# slurmctld insists on running on the host SlurmctldHost names.
CONTROLLER="$(hostname -s)"
BIG_NODE=slurm2big
BIG_NODE_CPUS=64
BIG_NODE_PORT=6838
SLURMCTLD_PORT=6827
SLURMD_PORT=6828
DBD_PORT=6829

COMPONENT_NAME=slurm2
S2_DIR="$TESTBED_DIR/slurm2"
DAEMON_DIR="$S2_DIR"
ROOTFS="$S2_DIR/rootfs"
READY_MARK="$ROOTFS/.batchbridge-ready"
CLIENT_KEY="$TESTBED_DIR/ssh/id_ed25519"
HOST_KEY="$S2_DIR/ssh_host_ed25519_key"
KNOWN_HOSTS="$S2_DIR/known_hosts"
FACTS="$S2_DIR/facts.json"
LOCK_FILE="$S2_DIR/.lock"
DB_PASSWORD_FILE="$S2_DIR/db_password"
PACKAGES=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server openssh-server)
# Paths inside the root filesystem.
SSHD_CONFIG=/etc/batchbridge/sshd_config
SSHD_LOG=/var/log/batchbridge-sshd.log
SLURM_CONF=/etc/slurm/slurm.conf
SLURMDBD_CONF=/etc/slurm/slurmdbd.conf
CGROUP_CONF=/etc/slurm/cgroup.conf
MYSQL_SOCKET=/run/mysqld/mysqld.sock
DB_NAME=slurm_acct_db
DB_USER=slurm

lock_fd=""

in_root() {
    chroot "$ROOTFS" "$@"
}

# daemon_is NAME PID : true if PID is NAME running in this root filesystem.
daemon_is() {
    [[ "$(cat "/proc/$2/comm" 2>/dev/null)" == "$1" ]] &&
        [[ "$(readlink "/proc/$2/root" 2>/dev/null)" == "$ROOTFS" ]]
}

stop_seconds() {
    case "$1" in
    mariadbd) echo 120 ;;
    slurmctld | slurmdbd) echo 60 ;;
    *) echo 30 ;;
    esac
}

ssh_batch() {
    ssh -F /dev/null -o UserKnownHostsFile="$KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR -o BatchMode=yes \
        -o IdentitiesOnly=yes -i "$CLIENT_KEY" -p "$SSH_PORT" "$BATCH_USER@$SSH_HOST" "$@" </dev/null
}

# ---------------------------------------------------------------------------
# Health checks

key_auth_ok() { [[ -r "$KNOWN_HOSTS" && -r "$CLIENT_KEY" ]] && ssh_batch true >/dev/null 2>&1; }
munge_ok() { in_root sh -c 'munge -n | unmunge' >/dev/null 2>&1; }
mariadb_ok() { in_root mariadb-admin --socket="$MYSQL_SOCKET" --connect-timeout=2 ping >/dev/null 2>&1; }
slurmdbd_ok() {
    port_open "$DBD_PORT" && timeout 10 chroot "$ROOTFS" sacctmgr -n -P show cluster >/dev/null 2>&1
}
slurmctld_ok() { [[ "$(timeout 5 chroot "$ROOTFS" scontrol ping 2>/dev/null)" == *" is UP"* ]]; }

node_states() { timeout 5 chroot "$ROOTFS" sinfo -h -n "$NODE" -o %T 2>/dev/null; }

node_ok() {
    local states line
    states="$(node_states)" || return 1
    [[ -n "$states" ]] || return 1
    while IFS= read -r line; do
        case "$line" in
        idle | mixed | allocated | completing) ;;
        *) return 1 ;;
        esac
    done <<<"$states"
}

# node_ready : node_ok, resuming the node if it is drained or down while its slurmd runs.
node_ready() {
    node_ok && return 0
    local states
    states="$(node_states || true)"
    if grep -Eqx 'down|drain(ed|ing)?' <<<"$states"; then
        log "slurm2: node $NODE is '${states//$'\n'/,}', resuming it"
        in_root scontrol update nodename="$NODE" state=resume >&2 || true
    fi
    return 1
}

accounting_ok() {
    local users
    users="$(timeout 10 chroot "$ROOTFS" sacctmgr -n -P show assoc where cluster="$CLUSTER" \
        account="$ACCOUNT" user="$BATCH_USER" format=User 2>/dev/null)" || return 1
    [[ "$users" == *"$BATCH_USER"* ]]
}

# limits_ok : the refusal tests' QOS and account are there with their limit of one job.
limits_ok() {
    local limit qos capped
    limit="$(timeout 10 chroot "$ROOTFS" sacctmgr -n -P show assoc where cluster="$CLUSTER" \
        account="$LIMIT_ACCOUNT" user="$BATCH_USER" format=MaxSubmit 2>/dev/null)" || return 1
    qos="$(timeout 10 chroot "$ROOTFS" sacctmgr -n -P show qos "$LIMIT_QOS" format=MaxSubmitPU 2>/dev/null)" ||
        return 1
    [[ "$limit" == 1 && "$qos" == 1 ]] || return 1
    capped="$(timeout 10 chroot "$ROOTFS" sacctmgr -n -P show qos "$CAPPED_QOS" format=MaxSubmitPU 2>/dev/null)" ||
        return 1
    [[ "$capped" == "$CAPPED_MAX_SUBMIT" ]] || return 1
    timeout 10 chroot "$ROOTFS" scontrol -o show partition "$CAPPED_PARTITION" 2>/dev/null | grep -q " QoS=$CAPPED_QOS "
}

cluster_ok() {
    slurmctld_ok && port_open "$SLURMD_PORT" && node_ok && accounting_ok && key_auth_ok
}

# ---------------------------------------------------------------------------
# The root filesystem

# The processes whose root directory is the root filesystem: daemons, sshd, jobs.
rootfs_pids() {
    local p
    for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/root" 2>/dev/null)" == "$ROOTFS" ]] && printf '%s\n' "${p#/proc/}"
    done
    return 0
}

build_rootfs() {
    apt_install debootstrap
    if mountpoint -q "$ROOTFS/proc"; then
        die "$ROOTFS is mounted but not complete; run 'slurm2.sh down' first"
    fi
    rm -rf "$ROOTFS"
    log "slurm2: debootstrap $SUITE into $ROOTFS"
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$S2_DIR/debootstrap.log" 2>&1 ||
        { tail -n 20 "$S2_DIR/debootstrap.log" >&2; die "debootstrap failed"; }
    mount_rootfs
    # No service may start while packages install.
    printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
    chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
    log "slurm2: installing ${PACKAGES[*]} in the root filesystem"
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Retries=3 update >&2
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Acquire::Retries=3 install \
        --no-install-recommends "${PACKAGES[@]}" >&2
    in_root apt-get clean
    touch "$READY_MARK"
}

mount_rootfs() {
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    if ! mountpoint -q "$ROOTFS/dev"; then
        mount --rbind /dev "$ROOTFS/dev"
        mount --make-rslave "$ROOTFS/dev"
    fi
    mountpoint -q "$ROOTFS/sys" || mount -t sysfs sysfs "$ROOTFS/sys"
    cp /etc/resolv.conf "$ROOTFS/etc/"
    # The node's name resolves to the loopback address, in here only.
    { cat /etc/hosts; printf '127.0.0.1 %s\n' "$NODE"; } >"$ROOTFS/etc/hosts"
}

unmount_rootfs() {
    local path
    for path in "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/proc"; do
        if mountpoint -q "$path"; then
            umount -R "$path" || umount -R -l "$path"
        fi
    done
}

ensure_users() {
    in_root id -u "$BATCH_USER" >/dev/null 2>&1 ||
        in_root useradd --create-home --shell /bin/bash "$BATCH_USER"
    # useradd leaves the account locked, and sshd (UsePAM no) refuses locked accounts.
    in_root usermod -p '*' "$BATCH_USER"
    in_root install -d -o "$BATCH_USER" -g "$BATCH_USER" -m 700 "/home/$BATCH_USER/.ssh"
    install -m 600 "$CLIENT_KEY.pub" "$ROOTFS/home/$BATCH_USER/.ssh/authorized_keys"
    in_root chown "$BATCH_USER:$BATCH_USER" "/home/$BATCH_USER/.ssh/authorized_keys"
}

# ---------------------------------------------------------------------------
# Configuration

slurm_conf_text() {
    cat <<EOF
# Generated by tests/testbed/slurm2.sh; rewritten by 'slurm2.sh up'.
ClusterName=$CLUSTER
SlurmctldHost=$CONTROLLER(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=/var/spool/slurm/ctld
SlurmdSpoolDir=/var/spool/slurm/d
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldDebug=info
SlurmdDebug=info

ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=30
MaxJobCount=50000
KillWait=5
InactiveLimit=0
Waittime=0
MailProg=/bin/true
# Preemption by partition: a job may preempt only jobs of partitions with a lower
# PriorityTier (every partition has the default 1 but $PREEMPTEE_PARTITION, 0), and those
# are requeued. A count-only GRES ($PREEMPT_GRES, no device file) is what the pair contend
# for.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
GresTypes=$PREEMPT_GRES

AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# QOS and association limits (MaxSubmitJobs) are enforced only with this; it also
# refuses an account the user has no association with.
AccountingStorageEnforce=limits

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$NODE_CPUS RealMemory=$NODE_MEMORY_MB Gres=$PREEMPT_GRES:1 State=UNKNOWN
# Since 23.02 sbatch refuses a job no node of the partition could ever hold (22.05 queued
# it, reason PartitionConfig). A job that waits for what it cannot get here waits for this
# node, declared and never started (no slurmd answers on its port).
NodeName=$BIG_NODE NodeAddr=127.0.0.1 Port=$BIG_NODE_PORT CPUs=$BIG_NODE_CPUS RealMemory=$((BIG_NODE_CPUS * 1024)) State=DOWN Reason="never started"
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=single Nodes=ALL Default=NO MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
PartitionName=$DRAINABLE_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
PartitionName=$CAPPED_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP QOS=$CAPPED_QOS
PartitionName=$PREEMPTEE_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP PriorityTier=0 PreemptMode=REQUEUE
PartitionName=$PREEMPTOR_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
EOF
}

slurmdbd_conf_text() {
    cat <<EOF
# Generated by tests/testbed/slurm2.sh; rewritten by 'slurm2.sh up'.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=slurm
DebugLevel=info
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=0
StorageUser=$DB_USER
StoragePass=$(tr -dc 'A-Za-z0-9' <"$DB_PASSWORD_FILE")
StorageLoc=$DB_NAME
EOF
}

sshd_config_text() {
    cat <<EOF
# Generated by tests/testbed/slurm2.sh.
ListenAddress $SSH_HOST
Port $SSH_PORT
HostKey /etc/batchbridge/ssh_host_ed25519_key
PidFile /run/batchbridge-sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowUsers $BATCH_USER
MaxStartups 200:30:400
MaxSessions 200
UseDNS no
PrintMotd no
PerSourcePenalties no
EOF
}

# SLURM 24.11's slurmd initialises a cgroup plugin even with proctrack/linuxproc and
# task/none, and fails without a cgroup file system in the root filesystem; 22.05 did not.
cgroup_conf_text() {
    cat <<EOF
# Generated by tests/testbed/slurm2.sh: no cgroups (proctrack/linuxproc, task/none).
CgroupPlugin=disabled
EOF
}

configs_current() {
    [[ -r "$DB_PASSWORD_FILE" ]] &&
        [[ "$(cat "$ROOTFS$CGROUP_CONF" 2>/dev/null)" == "$(cgroup_conf_text)" ]] &&
        [[ "$(cat "$ROOTFS$SLURM_CONF" 2>/dev/null)" == "$(slurm_conf_text)" ]] &&
        [[ "$(cat "$ROOTFS$SLURMDBD_CONF" 2>/dev/null)" == "$(slurmdbd_conf_text)" ]]
}

configure() {
    ensure_secret_file "$DB_PASSWORD_FILE"
    ensure_keypair "$HOST_KEY" batchbridge-testbed-slurm2-host
    install -d -m 755 "$ROOTFS/etc/batchbridge" "$ROOTFS/run/sshd"
    install -m 600 "$HOST_KEY" "$ROOTFS/etc/batchbridge/ssh_host_ed25519_key"
    printf '[%s]:%s %s\n' "$SSH_HOST" "$SSH_PORT" "$(awk '{print $1, $2}' "$HOST_KEY.pub")" \
        >"$KNOWN_HOSTS"
    chmod 644 "$KNOWN_HOSTS"
    sshd_config_text >"$ROOTFS$SSHD_CONFIG"
    in_root /usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "sshd -t rejected $SSHD_CONFIG"

    in_root install -d -o slurm -g slurm -m 755 /run/slurm /var/spool/slurm /var/log/slurm
    in_root install -d -o slurm -g slurm -m 700 /var/spool/slurm/ctld
    in_root install -d -m 755 /var/spool/slurm/d
    in_root install -d -o munge -g munge -m 755 /run/munge
    in_root install -d -o mysql -g mysql -m 755 /run/mysqld
    if [[ ! -s "$ROOTFS/etc/munge/munge.key" ]]; then
        in_root mungekey --create --keyfile=/etc/munge/munge.key
    fi
    in_root chown munge:munge /etc/munge/munge.key
    in_root chmod 400 /etc/munge/munge.key
    slurm_conf_text >"$ROOTFS$SLURM_CONF"
    cgroup_conf_text >"$ROOTFS$CGROUP_CONF"
    chmod 644 "$ROOTFS$SLURM_CONF" "$ROOTFS$CGROUP_CONF"
    # slurmdbd insists on mode 600 and ownership by SlurmUser.
    (umask 077 && slurmdbd_conf_text >"$ROOTFS$SLURMDBD_CONF")
    in_root chown slurm:slurm "$SLURMDBD_CONF"
}

# ---------------------------------------------------------------------------
# Daemons (started with lib.sh's start_daemon, in the foreground, inside the root)

ensure_munged() {
    munge_ok && return 0
    stop_daemon munged "$(stop_seconds munged)"
    start_daemon munged chroot "$ROOTFS" setpriv --reuid=munge --regid=munge --init-groups -- \
        munged --foreground
    wait_daemon munged 30 "munge -n | unmunge" munge_ok
}

ensure_mariadb() {
    if ! mariadb_ok; then
        if [[ ! -d "$ROOTFS/var/lib/mysql/mysql" ]]; then
            log "slurm2: initialising MariaDB"
            in_root install -d -o mysql -g mysql -m 755 /var/lib/mysql
            in_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
                --auth-root-authentication-method=socket --skip-test-db \
                >>"$(log_file mariadbd)" 2>&1 || die "mariadb-install-db failed, see $(log_file mariadbd)"
        fi
        stop_daemon mariadbd "$(stop_seconds mariadbd)"
        start_daemon mariadbd chroot "$ROOTFS" mariadbd --user=mysql --datadir=/var/lib/mysql \
            --socket="$MYSQL_SOCKET" --pid-file=/run/mysqld/mysqld.pid --skip-networking \
            --innodb-lock-wait-timeout=900
        wait_daemon mariadbd 120 "mariadb-admin ping" mariadb_ok
    fi
    local pw
    pw="$(tr -dc 'A-Za-z0-9' <"$DB_PASSWORD_FILE")"
    in_root mariadb --socket="$MYSQL_SOCKET" --batch <<EOF || die "could not set up database $DB_NAME"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pw';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$pw';
GRANT ALL PRIVILEGES ON $DB_NAME.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
EOF
}

ensure_slurmdbd() {
    slurmdbd_ok && return 0
    stop_daemon slurmdbd "$(stop_seconds slurmdbd)"
    port_open "$DBD_PORT" && die "something else listens on port $DBD_PORT (not our slurmdbd)"
    start_daemon slurmdbd chroot "$ROOTFS" slurmdbd -D
    # The first start creates the accounting tables; that takes a while.
    wait_daemon slurmdbd 180 "slurmdbd on port $DBD_PORT" slurmdbd_ok
}

ensure_cluster_record() {
    in_root sacctmgr -n -P show cluster format=Cluster | grep -qx "$CLUSTER" && return 0
    log "slurm2: adding cluster $CLUSTER to the accounting database"
    in_root sacctmgr -i add cluster "$CLUSTER" >&2 || die "sacctmgr add cluster failed"
}

ensure_slurmctld() {
    slurmctld_ok && return 0
    stop_daemon slurmctld "$(stop_seconds slurmctld)"
    start_daemon slurmctld chroot "$ROOTFS" slurmctld -D
    wait_daemon slurmctld 60 "scontrol ping to say UP" slurmctld_ok
}

ensure_slurmd() {
    if ! daemon_pid slurmd >/dev/null; then
        port_open "$SLURMD_PORT" && die "something else listens on port $SLURMD_PORT (not our slurmd)"
        start_daemon slurmd chroot "$ROOTFS" slurmd -D -N "$NODE"
    fi
    wait_daemon slurmd 60 "node $NODE to be idle (sinfo)" node_ready
}

ensure_accounts() {
    if [[ -z "$(in_root sacctmgr -n -P show account "$ACCOUNT" format=Account)" ]]; then
        log "slurm2: adding account $ACCOUNT"
        in_root sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" \
            Description="batchbridge tests" Organization=batchbridge >&2 ||
            die "sacctmgr add account failed"
    fi
    if ! accounting_ok; then
        log "slurm2: adding user $BATCH_USER to account $ACCOUNT"
        in_root sacctmgr -i add user "$BATCH_USER" Account="$ACCOUNT" Cluster="$CLUSTER" >&2 ||
            die "sacctmgr add user failed"
    fi
}

# ensure_capped_qos : the capped partition's QOS, MaxSubmitJobsPerUser=CAPPED_MAX_SUBMIT.
# Made before slurmctld starts, which reads it as the partition's QOS.
ensure_capped_qos() {
    if [[ -z "$(in_root sacctmgr -n -P show qos "$CAPPED_QOS" format=Name)" ]]; then
        log "slurm2: adding QOS $CAPPED_QOS"
        in_root sacctmgr -i add qos "$CAPPED_QOS" >&2 || die "sacctmgr add qos $CAPPED_QOS failed"
    fi
    in_root sacctmgr -i modify qos "$CAPPED_QOS" set MaxSubmitJobsPerUser="$CAPPED_MAX_SUBMIT" \
        >/dev/null || die "sacctmgr modify qos $CAPPED_QOS failed"
}

# ensure_limits : the refusal tests' QOS (MaxSubmitJobsPerUser=1, allowed to the user) and
# the user's association with their account (MaxSubmitJobs=1); their partition back up, in
# case a test was killed before it could restore it.
ensure_limits() {
    if [[ -z "$(in_root sacctmgr -n -P show qos "$LIMIT_QOS" format=Name)" ]]; then
        log "slurm2: adding QOS $LIMIT_QOS"
        in_root sacctmgr -i add qos "$LIMIT_QOS" >&2 || die "sacctmgr add qos failed"
    fi
    in_root sacctmgr -i modify qos "$LIMIT_QOS" set MaxSubmitJobsPerUser=1 >/dev/null ||
        die "sacctmgr modify qos failed"
    in_root sacctmgr -i modify user "$BATCH_USER" where cluster="$CLUSTER" set QOS+="$LIMIT_QOS" \
        >/dev/null || die "sacctmgr modify user (QOS) failed"
    if [[ -z "$(in_root sacctmgr -n -P show account "$LIMIT_ACCOUNT" format=Account)" ]]; then
        log "slurm2: adding account $LIMIT_ACCOUNT"
        in_root sacctmgr -i add account "$LIMIT_ACCOUNT" Cluster="$CLUSTER" \
            Description="batchbridge refusal tests" Organization=batchbridge >&2 ||
            die "sacctmgr add account failed"
    fi
    if [[ -z "$(in_root sacctmgr -n -P show assoc where cluster="$CLUSTER" account="$LIMIT_ACCOUNT" \
        user="$BATCH_USER" format=User)" ]]; then
        in_root sacctmgr -i add user "$BATCH_USER" Account="$LIMIT_ACCOUNT" Cluster="$CLUSTER" >&2 ||
            die "sacctmgr add user failed"
    fi
    in_root sacctmgr -i modify user "$BATCH_USER" where cluster="$CLUSTER" account="$LIMIT_ACCOUNT" \
        set MaxSubmitJobs=1 >/dev/null || die "sacctmgr modify user (MaxSubmitJobs) failed"
    in_root scontrol update PartitionName="$DRAINABLE_PARTITION" State=UP >&2 ||
        die "scontrol update partition failed"
    in_root scontrol update PartitionName="$CAPPED_PARTITION" QOS="$CAPPED_QOS" >&2 ||
        die "scontrol update partition $CAPPED_PARTITION failed"
    limits_ok || die "the refusal tests' limits are not in place"
}

ensure_sshd() {
    port_open "$SSH_PORT" && return 0
    log "slurm2: starting sshd on $SSH_HOST:$SSH_PORT"
    in_root /usr/sbin/sshd -f "$SSHD_CONFIG" -E "$SSHD_LOG" {lock_fd}>&- </dev/null
    WAIT_FOR_SLEEP=0.5 wait_for 60 "key login to $BATCH_USER@$SSH_HOST:$SSH_PORT" key_auth_ok ||
        die "sshd in the root filesystem does not accept the key (log: $ROOTFS$SSHD_LOG)"
}

# A job as `batch` over ssh, until sacct says it COMPLETED.
prove_job_via_ssh() {
    local out
    # shellcheck disable=SC2016 # runs in the remote shell
    if ! out="$(ssh_batch 'set -e
id=$(sbatch --parsable -J testbed-check -o /dev/null --wrap "echo hi")
id=${id%%;*}
for i in $(seq 1 300); do
    st=$(sacct -j "$id" -n -X -P -o State 2>/dev/null || true)
    case "$st" in
    COMPLETED) echo "job $id COMPLETED"; exit 0 ;;
    FAILED* | CANCELLED* | TIMEOUT* | NODE_FAIL* | OUT_OF_MEMORY* | BOOT_FAIL*)
        echo "job $id ended $st"; exit 1 ;;
    esac
    sleep 0.1
done
echo "job $id: sacct state after 30s+: ${st:-none}"
exit 1' 2>&1)"; then
        die "SLURM 24.11 does not run jobs for $BATCH_USER through ssh: $out (see $S2_DIR/*.log)"
    fi
    log "slurm2: as $BATCH_USER via ssh: $out"
}

write_facts() {
    local parts="" p version
    for p in "${PARTITIONS[@]}"; do
        parts+="${parts:+,}\"$(json_escape "$p")\""
    done
    version="$(in_root sinfo --version)"
    printf '{"host":"%s","port":%d,"user":"%s","private_key":"%s","known_hosts":"%s","cluster":"%s","partitions":[%s],"default_partition":"%s","account":"%s","node":"%s","cpus":%d,"version":"%s","root":"%s","capped_partition":"%s","capped_max_submit":%d}\n' \
        "$SSH_HOST" "$SSH_PORT" "$BATCH_USER" "$(json_escape "$CLIENT_KEY")" \
        "$(json_escape "$KNOWN_HOSTS")" "$CLUSTER" "$parts" "$DEFAULT_PARTITION" "$ACCOUNT" \
        "$NODE" "$NODE_CPUS" "$(json_escape "$version")" "$(json_escape "$ROOTFS")" \
        "$CAPPED_PARTITION" "$CAPPED_MAX_SUBMIT" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$S2_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 900 "$lock_fd" || die "could not lock $LOCK_FILE"
}

fast_path_ok() {
    [[ -s "$FACTS" && -e "$READY_MARK" ]] && configs_current && cluster_ok && limits_ok
}

cmd_up() {
    if fast_path_ok; then
        log "slurm2: already up on $SSH_HOST:$SSH_PORT (cluster $CLUSTER)"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "slurm2.sh up must run as root"
    [[ -r "$CLIENT_KEY.pub" ]] || die "$CLIENT_KEY.pub missing: run 'sshd.sh up' first"
    local started=$SECONDS
    take_lock
    if fast_path_ok; then
        log "slurm2: already up on $SSH_HOST:$SSH_PORT (cluster $CLUSTER)"
        return 0
    fi
    [[ -e "$READY_MARK" ]] || build_rootfs
    mount_rootfs
    ensure_users
    if ! configs_current; then
        # A changed configuration needs every SLURM daemon restarted.
        local name
        for name in slurmd slurmctld slurmdbd; do
            stop_daemon "$name" "$(stop_seconds "$name")"
        done
    fi
    configure
    ensure_munged
    ensure_mariadb
    ensure_slurmdbd
    ensure_cluster_record
    ensure_capped_qos
    ensure_slurmctld
    ensure_slurmd
    ensure_accounts
    ensure_limits
    ensure_sshd
    prove_job_via_ssh
    write_facts
    log "slurm2: up on $SSH_HOST:$SSH_PORT (cluster $CLUSTER, $(in_root sinfo --version)) in $((SECONDS - started))s, facts: $FACTS"
}

cmd_down() {
    local pids
    [[ -d "$S2_DIR" ]] && take_lock
    mapfile -t pids < <(rootfs_pids)
    if ((${#pids[@]} > 0)); then
        log "slurm2: stopping ${#pids[@]} processes in the root filesystem"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        WAIT_FOR_SLEEP=0.5 wait_for 60 "the processes in $ROOTFS to exit" \
            eval '[[ -z "$(rootfs_pids)" ]]' || true
        mapfile -t pids < <(rootfs_pids)
        ((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    rm -f "$S2_DIR"/*.pid
    unmount_rootfs
    log "slurm2: down (root filesystem kept in $ROOTFS)"
}

cmd_status() {
    if [[ -s "$FACTS" ]] && cluster_ok; then
        echo "slurm2: up on $SSH_HOST:$SSH_PORT (cluster $CLUSTER), facts: $FACTS"
        return 0
    fi
    echo "slurm2: down"
    return 1
}

cmd_stop_slurmdbd() {
    take_lock
    stop_daemon slurmdbd "$(stop_seconds slurmdbd)"
    ! port_open "$DBD_PORT" || die "port $DBD_PORT still open after stopping slurmdbd"
    log "slurm2: slurmdbd stopped (accounting unavailable)"
}

cmd_start_slurmdbd() {
    take_lock
    ensure_munged
    ensure_mariadb
    ensure_slurmdbd
    log "slurm2: slurmdbd up on port $DBD_PORT"
}

case "${1:-}" in
stop-slurmdbd) cmd_stop_slurmdbd ;;
start-slurmdbd) cmd_start_slurmdbd ;;
*) component_main "$@" ;;
esac
