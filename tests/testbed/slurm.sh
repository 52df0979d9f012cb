#!/usr/bin/env bash
# Test bed component: a one-node SLURM cluster with accounting (slurmdbd on
# MariaDB), used as user `batch` through the test bed sshd (sshd.sh).
#
# usage: slurm.sh up|down|status|stop-slurmdbd|start-slurmdbd|restart-slurmctld
#
#   up                 install the packages if needed (munge slurmctld slurmd
#                      slurm-client mariadb-server slurmdbd), write
#                      /etc/slurm/slurm.conf and slurmdbd.conf, start munged,
#                      mariadbd, slurmdbd, slurmctld and slurmd (in that order,
#                      each only if not already working), create the account
#                      and the `batch` user in the accounting database, run a
#                      job as `batch` through ssh until sacct says COMPLETED, and
#                      write $TESTBED_DIR/slurm/facts.json. Idempotent; returns
#                      quickly when everything is already up.
#   down               stop slurmd, slurmctld, slurmdbd, mariadbd and munged (by
#                      their pid files, in that order). Config, the accounting
#                      database and slurmctld's saved state are kept.
#   status             print whether the cluster is up; exit 0 if up, 1 if not.
#   stop-slurmdbd      stop only slurmdbd (accounting goes away: sacct and
#                      sacctmgr fail, squeue/sbatch/scancel keep working).
#   start-slurmdbd     start slurmdbd again (and munged/mariadbd if needed).
#   restart-slurmctld  stop and start slurmctld; queued and running jobs survive.
#
# Daemons run in the foreground (-D) as background processes of this script,
# detached with setsid; their output goes to $TESTBED_DIR/slurm/NAME.log and
# their pids to $TESTBED_DIR/slurm/NAME.pid. PID 1 need not be systemd.
# Requires the test bed sshd (sshd.sh up) for the end-to-end check.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

CLUSTER=batchbridge
ACCOUNT=batchbridge
BATCH_USER="batch"
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
# Declared, not measured (SlurmdParameters=config_overrides): 16 CPUs x
# DefMemPerCPU=1024 fit exactly, so CPUs are the limit (16 one-CPU jobs at once)
# and an exclusive job in `single` gets the whole node.
NODE_MEMORY_MB=16384
NODE="$(hostname -s)"

COMPONENT_NAME=slurm
SLURM_DIR="$TESTBED_DIR/slurm"
DAEMON_DIR="$SLURM_DIR"
FACTS="$SLURM_DIR/facts.json"
LOCK_FILE="$SLURM_DIR/.lock"
DB_PASSWORD_FILE="$SLURM_DIR/db_password"
SSH_FACTS="$TESTBED_DIR/ssh/facts.json"

CONF_DIR=/etc/slurm
SLURM_CONF="$CONF_DIR/slurm.conf"
SLURMDBD_CONF="$CONF_DIR/slurmdbd.conf"
SPOOL_DIR=/var/spool/slurm
STATE_SAVE_DIR="$SPOOL_DIR/ctld"
SLURMD_SPOOL_DIR="$SPOOL_DIR/d"
SLURM_RUN_DIR=/run/slurm
SLURMCTLD_PORT=6817
SLURMD_PORT=6818
DBD_HOST=127.0.0.1
DBD_PORT=6819

MUNGE_RUN_DIR=/run/munge
MUNGE_KEY=/etc/munge/munge.key

MYSQL_RUN_DIR=/run/mysqld
MYSQL_SOCKET="$MYSQL_RUN_DIR/mysqld.sock"
MYSQL_DATADIR=/var/lib/mysql
DB_NAME=slurm_acct_db
DB_USER=slurm

PACKAGES=(munge slurmctld slurmd slurm-client mariadb-server slurmdbd)
# Start order; `down` stops them in reverse.
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

lock_fd=""

# ---------------------------------------------------------------------------
# Processes (helpers in lib.sh)

# daemon_is NAME PID : true if PID's process is called NAME (the packaged daemons, by name).
daemon_is() {
    local comm
    comm="$(cat "/proc/$2/comm" 2>/dev/null || true)"
    [[ "$comm" == "$1" ]]
}

stop_seconds() {
    case "$1" in
    mariadbd) echo 120 ;;
    slurmctld | slurmdbd) echo 60 ;;
    *) echo 30 ;;
    esac
}

# ---------------------------------------------------------------------------
# Health checks (each quick, each safe to run when things are down)

munge_ok() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

mariadb_ok() {
    mariadb-admin --socket="$MYSQL_SOCKET" --connect-timeout=2 ping >/dev/null 2>&1
}

slurmdbd_ok() {
    port_open "$DBD_PORT" &&
        timeout 10 sacctmgr -n -P show cluster format=Cluster >/dev/null 2>&1
}

slurmctld_ok() {
    local out
    out="$(timeout 5 scontrol ping 2>/dev/null || true)"
    [[ "$out" == *" is UP"* ]]
}

# node_states : the node's state in every partition, one a line (sinfo %T).
node_states() {
    timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null
}

# node_ok : the node answers and can run jobs (idle, or busy with jobs).
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

# accounting_ok : slurmdbd (and the database behind it) answers and knows the
# batch user's association.
accounting_ok() {
    local users
    users="$(timeout 10 sacctmgr -n -P show assoc where cluster="$CLUSTER" \
        account="$ACCOUNT" user="$BATCH_USER" format=User 2>/dev/null)" || return 1
    [[ "$users" == *"$BATCH_USER"* ]]
}

# limits_ok : the refusal tests' QOS and account are there with their limit of one job.
limits_ok() {
    local limit qos capped
    limit="$(timeout 10 sacctmgr -n -P show assoc where cluster="$CLUSTER" \
        account="$LIMIT_ACCOUNT" user="$BATCH_USER" format=MaxSubmit 2>/dev/null)" || return 1
    qos="$(timeout 10 sacctmgr -n -P show qos "$LIMIT_QOS" format=MaxSubmitPU 2>/dev/null)" ||
        return 1
    [[ "$limit" == 1 && "$qos" == 1 ]] || return 1
    capped="$(timeout 10 sacctmgr -n -P show qos "$CAPPED_QOS" format=MaxSubmitPU 2>/dev/null)" ||
        return 1
    [[ "$capped" == "$CAPPED_MAX_SUBMIT" ]] || return 1
    timeout 10 scontrol -o show partition "$CAPPED_PARTITION" 2>/dev/null | grep -q " QoS=$CAPPED_QOS "
}

# cluster_ok : every daemon answers. slurmctld keeps a node idle for minutes
# after its slurmd died, so slurmd's port is checked directly.
cluster_ok() {
    slurmctld_ok && port_open "$SLURMD_PORT" && node_ok && accounting_ok
}

# ---------------------------------------------------------------------------
# Configuration

db_password() {
    tr -dc 'A-Za-z0-9' <"$DB_PASSWORD_FILE"
}

slurm_conf_text() {
    cat <<EOF
# Generated by tests/testbed/slurm.sh; rewritten by 'slurm.sh up'.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=$STATE_SAVE_DIR
SlurmdSpoolDir=$SLURMD_SPOOL_DIR
SlurmctldPidFile=$SLURM_RUN_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_RUN_DIR/slurmd.pid
# No log files: the daemons run with -D and log to stderr (slurm.sh's logs).
SlurmctldDebug=info
SlurmdDebug=info

ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=30
# The operator's scale benchmark (batchbridge-operator/tests/scale_bench.rs) queues up to
# 10,000 jobs at once: the default MaxJobCount of 10000 (finished jobs count until
# MinJobAge) would refuse submits, the benchmark's and other tests' alike.
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
AccountingStorageHost=$DBD_HOST
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# QOS and association limits (MaxSubmitJobs) are enforced only with this; it also
# refuses an account the user has no association with.
AccountingStorageEnforce=limits

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$NODE_CPUS RealMemory=$NODE_MEMORY_MB Gres=$PREEMPT_GRES:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
# Every job in 'single' gets the whole node, so its jobs run one at a time.
PartitionName=single Nodes=ALL Default=NO MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
PartitionName=$DRAINABLE_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
PartitionName=$CAPPED_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP QOS=$CAPPED_QOS
PartitionName=$PREEMPTEE_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP PriorityTier=0 PreemptMode=REQUEUE
PartitionName=$PREEMPTOR_PARTITION Nodes=$NODE Default=NO MaxTime=INFINITE State=UP
EOF
}

slurmdbd_conf_text() {
    cat <<EOF
# Generated by tests/testbed/slurm.sh; rewritten by 'slurm.sh up'.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=$DBD_HOST
DbdPort=$DBD_PORT
SlurmUser=slurm
DebugLevel=info
PidFile=$SLURM_RUN_DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DB_USER
StoragePass=$(db_password)
StorageLoc=$DB_NAME
EOF
}

# configs_current : the config files are what this script would write.
configs_current() {
    [[ -r "$SLURM_CONF" && -r "$SLURMDBD_CONF" && -r "$DB_PASSWORD_FILE" ]] || return 1
    [[ "$(cat "$SLURM_CONF")" == "$(slurm_conf_text)" ]] || return 1
    [[ "$(cat "$SLURMDBD_CONF")" == "$(slurmdbd_conf_text)" ]]
}

# write_file PATH MODE OWNER : write stdin to PATH atomically; exit 0 if the
# content changed, 1 if it was already the same.
write_file() {
    local path="$1" mode="$2" owner="$3" tmp
    tmp="$path.tmp.$$"
    (umask 077 && cat >"$tmp")
    chown "$owner" "$tmp"
    chmod "$mode" "$tmp"
    if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
        chown "$owner" "$path"
        chmod "$mode" "$path"
        return 1
    fi
    mv -f "$tmp" "$path"
}

# ---------------------------------------------------------------------------
# Set-up steps (all idempotent)

ensure_users() {
    local user
    if ! id -u slurm >/dev/null 2>&1; then
        log "creating system user slurm"
        adduser --system --group --no-create-home --home /nonexistent slurm >&2
    fi
    for user in munge mysql "$BATCH_USER"; do
        id -u "$user" >/dev/null 2>&1 || die "user $user does not exist (packages / sshd.sh up missing?)"
    done
}

ensure_dirs() {
    install -d -m 755 "$TESTBED_DIR" "$SLURM_DIR"
    chmod 755 "$SLURM_DIR"
    install -d -m 755 "$CONF_DIR" "$SPOOL_DIR" "$SLURMD_SPOOL_DIR"
    install -d -o slurm -g slurm -m 700 "$STATE_SAVE_DIR"
    install -d -o slurm -g slurm -m 755 "$SLURM_RUN_DIR"
    install -d -o munge -g munge -m 755 "$MUNGE_RUN_DIR"
    install -d -o mysql -g mysql -m 755 "$MYSQL_RUN_DIR"
    chown slurm:slurm "$STATE_SAVE_DIR" "$SLURM_RUN_DIR"
}

ensure_munge_key() {
    if [[ ! -s "$MUNGE_KEY" ]]; then
        log "generating munge key $MUNGE_KEY"
        install -d -o munge -g munge -m 700 "$(dirname "$MUNGE_KEY")"
        rm -f "$MUNGE_KEY"
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$MUNGE_KEY"
        else
            (umask 077 && dd if=/dev/urandom bs=1 count=1024 of="$MUNGE_KEY" status=none)
        fi
    fi
    chown munge:munge "$MUNGE_KEY"
    chmod 400 "$MUNGE_KEY"
}

ensure_db_password() {
    ensure_secret_file "$DB_PASSWORD_FILE"
}

SLURM_CONF_CHANGED=0
SLURMDBD_CONF_CHANGED=0

write_configs() {
    if slurm_conf_text | write_file "$SLURM_CONF" 644 root:root; then
        log "slurm: wrote $SLURM_CONF"
        SLURM_CONF_CHANGED=1
    fi
    # slurmdbd insists on mode 600 and ownership by SlurmUser.
    if slurmdbd_conf_text | write_file "$SLURMDBD_CONF" 600 slurm:slurm; then
        log "slurm: wrote $SLURMDBD_CONF"
        SLURMDBD_CONF_CHANGED=1
    fi
}

ensure_munged() {
    munge_ok && return 0
    stop_daemon munged "$(stop_seconds munged)"
    start_daemon munged setpriv --reuid=munge --regid=munge --init-groups -- \
        munged --foreground
    wait_daemon munged 30 "munge -n | unmunge" munge_ok
}

ensure_mariadb() {
    if ! mariadb_ok; then
        if [[ ! -d "$MYSQL_DATADIR/mysql" ]]; then
            log "slurm: initialising MariaDB datadir $MYSQL_DATADIR"
            install -d -o mysql -g mysql -m 755 "$MYSQL_DATADIR"
            mariadb-install-db --user=mysql --datadir="$MYSQL_DATADIR" \
                --auth-root-authentication-method=socket --skip-test-db \
                >>"$(log_file mariadbd)" 2>&1 || die "mariadb-install-db failed, see $(log_file mariadbd)"
        fi
        stop_daemon mariadbd "$(stop_seconds mariadbd)"
        start_daemon mariadbd mariadbd --user=mysql --datadir="$MYSQL_DATADIR" \
            --socket="$MYSQL_SOCKET" --pid-file="$MYSQL_RUN_DIR/mysqld.pid" \
            --skip-networking --innodb-lock-wait-timeout=900
        wait_daemon mariadbd 120 "mariadb-admin ping" mariadb_ok
    fi
    local pw
    pw="$(db_password)"
    mariadb --socket="$MYSQL_SOCKET" --batch <<EOF || die "could not set up database $DB_NAME"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pw';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$pw';
GRANT ALL PRIVILEGES ON $DB_NAME.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
EOF
}

ensure_slurmdbd() {
    if ((SLURMDBD_CONF_CHANGED)); then
        stop_daemon slurmdbd "$(stop_seconds slurmdbd)"
    fi
    slurmdbd_ok && return 0
    stop_daemon slurmdbd "$(stop_seconds slurmdbd)"
    if port_open "$DBD_PORT"; then
        die "something else listens on $DBD_HOST:$DBD_PORT (not our slurmdbd)"
    fi
    start_daemon slurmdbd slurmdbd -D
    # The first start creates the accounting tables; that takes a while.
    wait_daemon slurmdbd 180 "slurmdbd on port $DBD_PORT" slurmdbd_ok
}

ensure_cluster() {
    local clusters
    clusters="$(sacctmgr -n -P show cluster format=Cluster)" || die "sacctmgr show cluster failed"
    if ! grep -qx "$CLUSTER" <<<"$clusters"; then
        log "slurm: adding cluster $CLUSTER to the accounting database"
        sacctmgr -i add cluster "$CLUSTER" >&2 || die "sacctmgr add cluster failed"
    fi
}

ensure_slurmctld() {
    if ((SLURM_CONF_CHANGED)); then
        # Node and partition changes need both daemons restarted.
        stop_daemon slurmd "$(stop_seconds slurmd)"
        stop_daemon slurmctld "$(stop_seconds slurmctld)"
    fi
    slurmctld_ok && return 0
    stop_daemon slurmctld "$(stop_seconds slurmctld)"
    start_daemon slurmctld slurmctld -D
    wait_daemon slurmctld 60 "scontrol ping to say UP" slurmctld_ok
}

# node_ready : node_ok, resuming the node if it is drained or down while its
# slurmd runs (e.g. after an unclean stop).
node_ready() {
    node_ok && return 0
    local states
    states="$(node_states || true)"
    if grep -Eqx 'down|drain(ed|ing)?' <<<"$states"; then
        log "slurm: node $NODE is '${states//$'\n'/,}', resuming it"
        scontrol update nodename="$NODE" state=resume >&2 || true
    fi
    return 1
}

ensure_slurmd() {
    if ! daemon_pid slurmd >/dev/null; then
        if port_open "$SLURMD_PORT"; then
            die "something else listens on port $SLURMD_PORT (not our slurmd)"
        fi
        start_daemon slurmd slurmd -D -N "$NODE"
    fi
    wait_daemon slurmd 60 "node $NODE to be idle (sinfo)" node_ready
}

ensure_accounts() {
    local out
    out="$(sacctmgr -n -P show assoc where cluster="$CLUSTER" account="$ACCOUNT" format=Account)" ||
        die "sacctmgr show assoc failed"
    if [[ -z "$out" ]]; then
        log "slurm: adding account $ACCOUNT"
        sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" \
            Description="batchbridge tests" Organization=batchbridge >&2 ||
            die "sacctmgr add account failed"
    fi
    if ! accounting_ok; then
        log "slurm: adding user $BATCH_USER to account $ACCOUNT"
        sacctmgr -i add user "$BATCH_USER" Account="$ACCOUNT" Cluster="$CLUSTER" >&2 ||
            die "sacctmgr add user failed"
    fi
}

# ensure_capped_qos : the capped partition's QOS, MaxSubmitJobsPerUser=CAPPED_MAX_SUBMIT.
# Made before slurmctld starts, which reads it as the partition's QOS.
ensure_capped_qos() {
    if [[ -z "$(sacctmgr -n -P show qos "$CAPPED_QOS" format=Name)" ]]; then
        log "slurm: adding QOS $CAPPED_QOS"
        sacctmgr -i add qos "$CAPPED_QOS" >&2 || die "sacctmgr add qos $CAPPED_QOS failed"
    fi
    sacctmgr -i modify qos "$CAPPED_QOS" set MaxSubmitJobsPerUser="$CAPPED_MAX_SUBMIT" \
        >/dev/null || die "sacctmgr modify qos $CAPPED_QOS failed"
}

# ensure_limits : the refusal tests' QOS (MaxSubmitJobsPerUser=1, allowed to the user) and
# the user's association with their account (MaxSubmitJobs=1); their partition back up, in
# case a test was killed before it could restore it.
ensure_limits() {
    if [[ -z "$(sacctmgr -n -P show qos "$LIMIT_QOS" format=Name)" ]]; then
        log "slurm: adding QOS $LIMIT_QOS"
        sacctmgr -i add qos "$LIMIT_QOS" >&2 || die "sacctmgr add qos failed"
    fi
    sacctmgr -i modify qos "$LIMIT_QOS" set MaxSubmitJobsPerUser=1 >/dev/null ||
        die "sacctmgr modify qos failed"
    sacctmgr -i modify user "$BATCH_USER" where cluster="$CLUSTER" set QOS+="$LIMIT_QOS" \
        >/dev/null || die "sacctmgr modify user (QOS) failed"
    if [[ -z "$(sacctmgr -n -P show account "$LIMIT_ACCOUNT" format=Account)" ]]; then
        log "slurm: adding account $LIMIT_ACCOUNT"
        sacctmgr -i add account "$LIMIT_ACCOUNT" Cluster="$CLUSTER" \
            Description="batchbridge refusal tests" Organization=batchbridge >&2 ||
            die "sacctmgr add account failed"
    fi
    if [[ -z "$(sacctmgr -n -P show assoc where cluster="$CLUSTER" account="$LIMIT_ACCOUNT" \
        user="$BATCH_USER" format=User)" ]]; then
        sacctmgr -i add user "$BATCH_USER" Account="$LIMIT_ACCOUNT" Cluster="$CLUSTER" >&2 ||
            die "sacctmgr add user failed"
    fi
    sacctmgr -i modify user "$BATCH_USER" where cluster="$CLUSTER" account="$LIMIT_ACCOUNT" \
        set MaxSubmitJobs=1 >/dev/null || die "sacctmgr modify user (MaxSubmitJobs) failed"
    scontrol update PartitionName="$DRAINABLE_PARTITION" State=UP >&2 ||
        die "scontrol update partition failed"
    scontrol update PartitionName="$CAPPED_PARTITION" QOS="$CAPPED_QOS" >&2 ||
        die "scontrol update partition $CAPPED_PARTITION failed"
    limits_ok || die "the refusal tests' limits are not in place"
}

# ssh_fact KEY : a value from the sshd component's facts.json.
ssh_fact() {
    sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$SSH_FACTS"
}

# prove_job_via_ssh : as the batch user, through the test bed sshd, submit a
# job and wait until sacct reports it COMPLETED.
prove_job_via_ssh() {
    [[ -s "$SSH_FACTS" ]] || die "$SSH_FACTS missing: run tests/testbed/sshd.sh up first"
    local host port user key known_hosts out
    host="$(ssh_fact host)"
    port="$(ssh_fact port)"
    user="$(ssh_fact user)"
    key="$(ssh_fact private_key)"
    known_hosts="$(ssh_fact known_hosts)"
    [[ -n "$host" && -n "$port" && -n "$user" && -n "$key" && -n "$known_hosts" ]] ||
        die "could not read host/port/user/private_key/known_hosts from $SSH_FACTS"
    # shellcheck disable=SC2016 # runs in the remote shell
    local remote='set -e
id=$(sbatch --parsable -J testbed-check -o /dev/null --wrap "echo hi")
id=${id%%;*}
st=""
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
exit 1'
    if ! out="$(ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes \
        -o UserKnownHostsFile="$known_hosts" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR \
        -i "$key" -p "$port" "$user@$host" "$remote" </dev/null 2>&1)"; then
        log "ERROR: end-to-end job as $user@$host:$port failed: $out"
        die "SLURM does not run jobs for $user through ssh (see $SLURM_DIR/*.log)"
    fi
    log "slurm: as $user via ssh: $out"
}

write_facts() {
    local parts="" p
    for p in "${PARTITIONS[@]}"; do
        parts+="${parts:+,}\"$(json_escape "$p")\""
    done
    printf '{"cluster":"%s","partitions":[%s],"default_partition":"%s","account":"%s","node":"%s","cpus":%d,"capped_partition":"%s","capped_max_submit":%d}\n' \
        "$(json_escape "$CLUSTER")" "$parts" "$(json_escape "$DEFAULT_PARTITION")" \
        "$(json_escape "$ACCOUNT")" "$(json_escape "$NODE")" "$NODE_CPUS" "$CAPPED_PARTITION" \
        "$CAPPED_MAX_SUBMIT" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$TESTBED_DIR" "$SLURM_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
}

require_root() {
    [[ "$(id -u)" == 0 ]] || die "slurm.sh $1 must run as root"
}

# ---------------------------------------------------------------------------
# Commands

fast_path_ok() {
    [[ -s "$FACTS" ]] && configs_current && cluster_ok && limits_ok
}

cmd_up() {
    if fast_path_ok; then
        log "slurm: already up (cluster $CLUSTER, node $NODE)"
        return 0
    fi
    [[ "$TESTBED_DIR" != *[[:space:]]* ]] || die "TESTBED_DIR must not contain whitespace: $TESTBED_DIR"
    require_root up
    take_lock
    # Someone else may have brought it up while we waited for the lock.
    if fast_path_ok; then
        log "slurm: already up (cluster $CLUSTER, node $NODE)"
        return 0
    fi

    apt_install "${PACKAGES[@]}"
    command -v setpriv >/dev/null || apt_install util-linux
    command -v ssh >/dev/null || apt_install openssh-client

    ensure_users
    ensure_dirs
    ensure_munge_key
    ensure_db_password
    write_configs

    ensure_munged
    ensure_mariadb
    ensure_slurmdbd
    ensure_cluster
    ensure_capped_qos
    ensure_slurmctld
    ensure_slurmd
    ensure_accounts
    ensure_limits
    prove_job_via_ssh
    write_facts
    log "slurm: up (cluster $CLUSTER, node $NODE, partitions ${PARTITIONS[*]}) in ${SECONDS}s, facts: $FACTS"
}

cmd_down() {
    require_root down
    [[ -d "$SLURM_DIR" ]] && take_lock
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[i]}" "$(stop_seconds "${DAEMONS[i]}")"
    done
    log "slurm: down"
}

cmd_status() {
    if cluster_ok; then
        echo "slurm: up (cluster $CLUSTER, node $NODE), facts: $FACTS"
        return 0
    fi
    local name pid details=()
    for name in "${DAEMONS[@]}"; do
        if pid="$(daemon_pid "$name")"; then
            details+=("$name:running($pid)")
        else
            details+=("$name:stopped")
        fi
    done
    echo "slurm: down (${details[*]})"
    return 1
}

cmd_stop_slurmdbd() {
    require_root stop-slurmdbd
    take_lock
    stop_daemon slurmdbd "$(stop_seconds slurmdbd)"
    if port_open "$DBD_PORT"; then
        die "port $DBD_PORT still open after stopping slurmdbd"
    fi
    log "slurm: slurmdbd stopped (accounting unavailable)"
}

cmd_start_slurmdbd() {
    require_root start-slurmdbd
    [[ -r "$SLURMDBD_CONF" ]] || die "$SLURMDBD_CONF missing: run 'slurm.sh up' first"
    take_lock
    ensure_munged
    ensure_mariadb
    ensure_slurmdbd
    log "slurm: slurmdbd up on $DBD_HOST:$DBD_PORT"
}

cmd_restart_slurmctld() {
    require_root restart-slurmctld
    [[ -r "$SLURM_CONF" ]] || die "$SLURM_CONF missing: run 'slurm.sh up' first"
    take_lock
    stop_daemon slurmctld "$(stop_seconds slurmctld)"
    ensure_munged
    ensure_slurmctld
    ensure_slurmd
    log "slurm: slurmctld restarted (pid $(daemon_pid slurmctld || echo '?'))"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
stop-slurmdbd) cmd_stop_slurmdbd ;;
start-slurmdbd) cmd_start_slurmdbd ;;
restart-slurmctld) cmd_restart_slurmctld ;;
*)
    echo "usage: $0 up|down|status|stop-slurmdbd|start-slurmdbd|restart-slurmctld" >&2
    exit 2
    ;;
esac
