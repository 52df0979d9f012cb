#!/usr/bin/env bash
# Test bed component: an HTCondor personal pool (collector, negotiator, schedd, startd) in a
# Debian trixie root filesystem, reached through its own sshd on 127.0.0.1:2223.
#
# usage: htcondor.sh up|down|status|stop-schedd|start-schedd|foreign-job
#
#   up      install debootstrap if needed; build the trixie root filesystem once (cached
#           under $TESTBED_DIR/htcondor/rootfs, about 30 s, then reused), with condor and
#           openssh-server in it; mount it (a bind mount of itself first: condor's jobs
#           need the chroot's / to be a mount point), proc, /dev and sysfs; create the
#           user `batch` reached with the sshd component's client key; start sshd and
#           condor_master inside; run a job as `batch` through ssh until condor_history
#           shows it completed; write facts.json. Idempotent; quick when already up.
#   down    stop every process running in the root filesystem and unmount it. The root
#           filesystem is kept for the next `up`.
#   status  print whether it is up; exit 0 if up, 1 if not.
#   stop-schedd, start-schedd   stop or start the schedd alone (fault tests: condor_q and
#           condor_submit fail while condor_history still answers).
#   foreign-job   submit a job as the user `other` (no ssh access), which `batch` may see
#           but not remove. It asks for 1024 CPUs, so it never takes a slot, and the
#           schedd removes it after 10 minutes.
#
# HTCondor must not tune the host's kernel through the shared /proc:
# ENABLE_KERNEL_TUNING = false is part of the pool's configuration.
# Requires the sshd component (sshd.sh up) for the client key.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

SSH_HOST=127.0.0.1
SSH_PORT=2223
SSH_USER="batch"
# The capped drains' login (submit limits hold jobs, issue 30): the user `capped` (same
# client key) whose HTCondor tools talk to a second schedd, `capped`, that takes at most
# CAPPED_MAX_JOBS jobs per owner (MAX_JOBS_PER_OWNER). `batch` and every other user's jobs go
# to the first schedd, which has no such limit.
CAPPED_USER="capped"
CAPPED_MAX_JOBS=10
# Beside the first schedd's SPOOL, not in it: condor_preen (every few hours) removes what it
# does not know from SPOOL, this directory with the capped schedd's queue and history
# included (seen at 17:50 on a bed up since the morning: its jobs were then lost).
CAPPED_SPOOL=/var/spool/condor-capped
SUITE=trixie
MIRROR=http://deb.debian.org/debian

HT_DIR="$TESTBED_DIR/htcondor"
ROOTFS="$HT_DIR/rootfs"
READY_MARK="$ROOTFS/.batchbridge-ready"
CLIENT_KEY="$TESTBED_DIR/ssh/id_ed25519"
HOST_KEY="$HT_DIR/ssh_host_ed25519_key"
KNOWN_HOSTS="$HT_DIR/known_hosts"
FACTS="$HT_DIR/facts.json"
LOCK_FILE="$HT_DIR/.lock"
# Paths inside the root filesystem.
SSHD_CONFIG=/etc/batchbridge/sshd_config
SSHD_LOG=/var/log/batchbridge-sshd.log

in_root() {
    chroot "$ROOTFS" "$@"
}

ssh_batch() {
    ssh_as "$SSH_USER" "$@"
}

# ssh_as USER COMMAND... : COMMAND as USER through the pool's sshd, with the client key.
ssh_as() {
    local user="$1"
    shift
    ssh -F /dev/null -o UserKnownHostsFile="$KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR -o BatchMode=yes \
        -o IdentitiesOnly=yes -i "$CLIENT_KEY" -p "$SSH_PORT" "$user@$SSH_HOST" "$@" </dev/null
}

key_auth_ok() {
    [[ -r "$KNOWN_HOSTS" && -r "$CLIENT_KEY" ]] && ssh_batch true >/dev/null 2>&1
}

slot_ok() {
    [[ -n "$(in_root condor_status -af Name 2>/dev/null)" ]]
}

pool_ok() {
    [[ -s "$FACTS" ]] && key_auth_ok && slot_ok
}

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
    if mountpoint -q "$ROOTFS"; then
        die "$ROOTFS is mounted but not complete; run 'htcondor.sh down' first"
    fi
    rm -rf "$ROOTFS"
    log "htcondor: debootstrap $SUITE into $ROOTFS"
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$HT_DIR/debootstrap.log" 2>&1 ||
        { tail -n 20 "$HT_DIR/debootstrap.log" >&2; die "debootstrap failed"; }
    mount_rootfs
    # No service may start while packages install.
    printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
    chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
    log "htcondor: installing condor and openssh-server in the root filesystem"
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Retries=3 update >&2
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Acquire::Retries=3 install \
        --no-install-recommends condor openssh-server >&2
    in_root apt-get clean
    touch "$READY_MARK"
}

mount_rootfs() {
    mountpoint -q "$ROOTFS" || mount --bind "$ROOTFS" "$ROOTFS"
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    if ! mountpoint -q "$ROOTFS/dev"; then
        mount --rbind /dev "$ROOTFS/dev"
        mount --make-rslave "$ROOTFS/dev"
    fi
    mountpoint -q "$ROOTFS/sys" || mount -t sysfs sysfs "$ROOTFS/sys"
    cp /etc/hosts /etc/resolv.conf "$ROOTFS/etc/"
}

unmount_rootfs() {
    local path
    for path in "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/proc" "$ROOTFS"; do
        if mountpoint -q "$path"; then
            umount -R "$path" || umount -R -l "$path"
        fi
    done
}

ensure_user() {
    in_root id -u "$SSH_USER" >/dev/null 2>&1 ||
        in_root useradd --create-home --shell /bin/bash "$SSH_USER"
    # useradd leaves the account locked, and sshd (UsePAM no) refuses locked accounts.
    in_root usermod -p '*' "$SSH_USER"
    # A second user, for jobs `batch` may not remove.
    in_root id -u other >/dev/null 2>&1 || in_root useradd --create-home --shell /bin/sh other
    in_root install -d -o "$SSH_USER" -g "$SSH_USER" -m 700 "/home/$SSH_USER/.ssh"
    install -m 600 "$CLIENT_KEY.pub" "$ROOTFS/home/$SSH_USER/.ssh/authorized_keys"
    in_root chown "$SSH_USER:$SSH_USER" "/home/$SSH_USER/.ssh/authorized_keys"
    ensure_capped_user
}

# ensure_capped_user : the user `capped`, reached with the client key, whose HTCondor tools
# (condor_submit, condor_q, condor_rm, condor_history) read ~/.condor/user_config and so
# use the capped schedd's address file and history.
ensure_capped_user() {
    local home="/home/$CAPPED_USER"
    in_root id -u "$CAPPED_USER" >/dev/null 2>&1 ||
        in_root useradd --create-home --shell /bin/bash "$CAPPED_USER"
    in_root usermod -p '*' "$CAPPED_USER"
    in_root install -d -o "$CAPPED_USER" -g "$CAPPED_USER" -m 700 "$home/.ssh" "$home/.condor"
    install -m 600 "$CLIENT_KEY.pub" "$ROOTFS$home/.ssh/authorized_keys"
    capped_user_config >"$ROOTFS$home/.condor/user_config"
    in_root chown "$CAPPED_USER:$CAPPED_USER" "$home/.ssh/authorized_keys" \
        "$home/.condor/user_config"
}

capped_user_config() {
    cat <<EOF
# Generated by tests/testbed/htcondor.sh: this user's tools talk to the capped schedd.
# Tools find "the local schedd" from its ad file first, then its address file.
SCHEDD_DAEMON_AD_FILE = $CAPPED_SPOOL/.schedd_classad
SCHEDD_ADDRESS_FILE = $CAPPED_SPOOL/.schedd_address
HISTORY = $CAPPED_SPOOL/history
EOF
}

configure() {
    ensure_keypair "$HOST_KEY" batchbridge-testbed-htcondor-host
    install -d -m 755 "$ROOTFS/etc/batchbridge" "$ROOTFS/run/sshd"
    install -m 600 "$HOST_KEY" "$ROOTFS/etc/batchbridge/ssh_host_ed25519_key"
    printf '[%s]:%s %s\n' "$SSH_HOST" "$SSH_PORT" "$(awk '{print $1, $2}' "$HOST_KEY.pub")" \
        >"$KNOWN_HOSTS"
    chmod 644 "$KNOWN_HOSTS"
    cat >"$ROOTFS$SSHD_CONFIG" <<EOF
# Generated by tests/testbed/htcondor.sh.
ListenAddress $SSH_HOST
Port $SSH_PORT
HostKey /etc/batchbridge/ssh_host_ed25519_key
PidFile /run/batchbridge-sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowUsers $SSH_USER $CAPPED_USER
MaxStartups 200:30:400
MaxSessions 200
UseDNS no
PrintMotd no
PerSourcePenalties no
EOF
    in_root /usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "sshd -t rejected $SSHD_CONFIG"
    # A running sshd reads a changed configuration (a new AllowUsers) on SIGHUP.
    if [[ -s "$ROOTFS/run/batchbridge-sshd.pid" ]]; then
        kill -HUP "$(cat "$ROOTFS/run/batchbridge-sshd.pid")" 2>/dev/null || true
    fi
    in_root install -d -o condor -g condor -m 755 "$CAPPED_SPOOL"
    condor_config >"$ROOTFS/etc/condor/config.d/50-batchbridge.conf"
}

# The pool's configuration; `up` reconfigures a running pool when this changes.
condor_config() {
    cat <<'EOF'
# Generated by tests/testbed/htcondor.sh: a personal pool on 127.0.0.1.
use ROLE : Personal
CONDOR_HOST = 127.0.0.1
NETWORK_INTERFACE = 127.0.0.1
BIND_ALL_INTERFACES = false
ENABLE_IPV6 = false
DAEMON_LIST = MASTER COLLECTOR NEGOTIATOR SCHEDD STARTD SCHEDD_CAPPED
# Without this, condor_master rewrites the host's kernel settings through the shared /proc.
ENABLE_KERNEL_TUNING = false
# Match within a second or two instead of 10 to 18.
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_MIN_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
# Evaluate periodic_remove (batchbridge's wall-time limit) every 5 s instead of 60.
PERIODIC_EXPR_INTERVAL = 5
# A removed job that ignores SIGTERM gets SIGKILL 5 s later instead of 10 minutes, like
# SLURM's KillWait=5 in slurm.sh: the conformance suite waits for it to end.
MachineMaxVacateTime = 5
EOF
    # Unquoted: the capped schedd's names and limit come from this script.
    cat <<EOF
# A second schedd for the capped drains: at most $CAPPED_MAX_JOBS jobs per owner. Only the
# user $CAPPED_USER talks to it (its ~/.condor/user_config).
SCHEDD_CAPPED = \$(SCHEDD)
SCHEDD_CAPPED_ARGS = -local-name capped
CAPPED.SCHEDD_NAME = capped
CAPPED.SPOOL = $CAPPED_SPOOL
# Its own queue log, history and address, never the first schedd's: two schedds on one
# queue log corrupt each other's jobs. (LOCALNAME.PARAM, not SCHEDD.LOCALNAME.PARAM, which
# HTCondor 23 ignores.)
CAPPED.JOB_QUEUE_LOG = $CAPPED_SPOOL/job_queue.log
CAPPED.SCHEDD_ADDRESS_FILE = $CAPPED_SPOOL/.schedd_address
CAPPED.SCHEDD_DAEMON_AD_FILE = $CAPPED_SPOOL/.schedd_classad
CAPPED.SCHEDD_LOG = \$(LOG)/SchedLog.capped
CAPPED.HISTORY = $CAPPED_SPOOL/history
CAPPED.MAX_JOBS_PER_OWNER = $CAPPED_MAX_JOBS
# The schedd recounts each owner's jobs every SCHEDD_INTERVAL (300 s by default); until
# then a job that left the queue still counts against MAX_JOBS_PER_OWNER, and a drain of
# 200 jobs would take ten at a time every five minutes.
CAPPED.SCHEDD_INTERVAL = 5
EOF
}

config_current() {
    [[ "$(condor_config)" == "$(cat "$ROOTFS/etc/condor/config.d/50-batchbridge.conf" 2>/dev/null)" ]]
}

start_daemons() {
    if ! port_open "$SSH_PORT"; then
        log "htcondor: starting sshd on $SSH_HOST:$SSH_PORT"
        in_root /usr/sbin/sshd -f "$SSHD_CONFIG" -E "$SSHD_LOG" {lock_fd}>&- </dev/null
    fi
    if ! pgrep -x condor_master >/dev/null || ! slot_ok; then
        log "htcondor: starting condor_master"
        in_root install -d -o condor -g condor /var/run/condor /var/lock/condor /var/log/condor
        in_root /usr/sbin/condor_master {lock_fd}>&- </dev/null
    fi
    WAIT_FOR_SLEEP=0.5 wait_for 60 "key login to $SSH_USER@$SSH_HOST:$SSH_PORT" key_auth_ok ||
        die "sshd in the root filesystem does not accept the key (log: $ROOTFS$SSHD_LOG)"
    WAIT_FOR_SLEEP=0.5 wait_for 120 "an HTCondor slot" slot_ok ||
        die "no slot appeared (logs: $ROOTFS/var/log/condor)"
}

# job_completed CLUSTER : true once condor_history says the cluster's job completed.
job_completed() {
    [[ "$(ssh_batch condor_history "$1" -af JobStatus 2>/dev/null)" == 4 ]]
}

# A job as `batch` over ssh, until condor_history says it completed.
end_to_end_check() {
    local cluster
    # shellcheck disable=SC2016 # expanded by the remote shell
    cluster="$(ssh_batch 'cd /tmp && printf "executable = /bin/true\nqueue\n" | condor_submit -terse - | cut -d. -f1')"
    [[ "$cluster" =~ ^[0-9]+$ ]] || die "condor_submit as $SSH_USER printed '$cluster'"
    WAIT_FOR_SLEEP=0.5 wait_for 120 "job $cluster to complete" job_completed "$cluster" ||
        die "a test job did not complete (see condor_q -better-analyze $cluster)"
    log "htcondor: as $SSH_USER via ssh: job $cluster completed"
}

capped_schedd_answers() {
    [[ -s "$ROOTFS$CAPPED_SPOOL/.schedd_address" ]] &&
        [[ "$(ssh_as "$CAPPED_USER" condor_config_val SCHEDD_ADDRESS_FILE 2>/dev/null)" == \
        "$CAPPED_SPOOL/.schedd_address" ]] &&
        ssh_as "$CAPPED_USER" condor_q -totals >/dev/null 2>&1
}

write_facts() {
    printf '{"host":"%s","port":%d,"user":"%s","private_key":"%s","known_hosts":"%s","capped_user":"%s","capped_max_jobs":%d}\n' \
        "$SSH_HOST" "$SSH_PORT" "$SSH_USER" "$(json_escape "$CLIENT_KEY")" \
        "$(json_escape "$KNOWN_HOSTS")" "$CAPPED_USER" "$CAPPED_MAX_JOBS" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

cmd_up() {
    if pool_ok && config_current && capped_schedd_answers; then
        log "htcondor: already up on $SSH_HOST:$SSH_PORT"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "htcondor.sh up must run as root"
    [[ -r "$CLIENT_KEY.pub" ]] || die "$CLIENT_KEY.pub missing: run 'sshd.sh up' first"
    local started=$SECONDS
    install -d -m 755 "$HT_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 900 "$lock_fd" || die "could not lock $LOCK_FILE"
    if pool_ok && config_current && capped_schedd_answers; then
        log "htcondor: already up on $SSH_HOST:$SSH_PORT"
        return 0
    fi
    [[ -e "$READY_MARK" ]] || build_rootfs
    mount_rootfs
    ensure_user
    local reconfigure=false
    if pgrep -x condor_master >/dev/null && ! config_current; then
        reconfigure=true
    fi
    configure
    if $reconfigure; then
        log "htcondor: configuration changed; reconfiguring the running pool"
        in_root condor_reconfig >/dev/null
    fi
    start_daemons
    # The capped schedd writes its address file only when it starts: if its spool lost it
    # (removed under a running pool), its user's tools would quietly fall back to the
    # first, uncapped schedd. Stopped, it is started again by condor_master and writes it.
    # Its job numbers then start again at 1, so the job records earlier tests left in its
    # user's batchbridge work directory go too (the backend refuses an id it has seen).
    if [[ ! -s "$ROOTFS$CAPPED_SPOOL/.schedd_address" ]] &&
        pkill -f '^condor_schedd -local-name capped'; then
        log "htcondor: the capped schedd had lost its address file; restarting it"
        rm -rf "$ROOTFS/home/$CAPPED_USER/.batchbridge"
    fi
    end_to_end_check
    WAIT_FOR_SLEEP=0.5 wait_for 60 "the capped schedd to answer $CAPPED_USER" \
        capped_schedd_answers || die "the capped schedd does not answer (log: SchedLog.capped)"
    write_facts
    log "htcondor: up on $SSH_HOST:$SSH_PORT in $((SECONDS - started))s, facts: $FACTS"
}

cmd_down() {
    local pids
    if [[ -d "$HT_DIR" ]]; then
        exec {lock_fd}>"$LOCK_FILE"
        flock -w 900 "$lock_fd" || die "could not lock $LOCK_FILE"
    fi
    mapfile -t pids < <(rootfs_pids)
    if ((${#pids[@]} > 0)); then
        log "htcondor: stopping ${#pids[@]} processes in the root filesystem"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        sleep 1
        mapfile -t pids < <(rootfs_pids)
        ((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    unmount_rootfs
    log "htcondor: down (root filesystem kept in $ROOTFS)"
}

cmd_status() {
    if pool_ok; then
        echo "htcondor: up on $SSH_HOST:$SSH_PORT, facts: $FACTS"
        return 0
    fi
    echo "htcondor: down"
    return 1
}

# Fault-test controls. They wait until the schedd is really gone or back.
cmd_stop_schedd() {
    in_root condor_off -schedd >/dev/null
    WAIT_FOR_SLEEP=0.5 wait_for 60 "the schedd to stop" schedd_gone ||
        die "the schedd did not stop"
    log "htcondor: schedd stopped"
}

cmd_start_schedd() {
    in_root condor_on -schedd >/dev/null
    WAIT_FOR_SLEEP=0.5 wait_for 120 "the schedd to answer" schedd_answers ||
        die "the schedd did not come back"
    log "htcondor: schedd started"
}

# The first schedd's process: the capped schedd (condor_schedd -local-name capped) stays up
# when it is stopped, and is no sign that it is still there.
schedd_gone() { ! pgrep -a -x condor_schedd | grep -qv -- '-local-name'; }
schedd_answers() { in_root runuser -u "$SSH_USER" -- condor_q -totals >/dev/null 2>&1; }

cmd_foreign_job() {
    # shellcheck disable=SC2016 # expanded by the job's shell
    in_root runuser -u other -- sh -c 'cd && printf "executable = /bin/sleep\narguments = 600\nrequest_cpus = 1024\nperiodic_remove = time() - QDate > 600\nqueue\n" | condor_submit -terse -'
}

case "${1:-}" in
stop-schedd) cmd_stop_schedd ;;
start-schedd) cmd_start_schedd ;;
foreign-job) cmd_foreign_job ;;
*) component_main "$@" ;;
esac
