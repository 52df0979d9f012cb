#!/usr/bin/env bash
# Test bed component: a single-node OpenPBS (PostgreSQL data service, comm, server,
# scheduler, mom) built from source, and an sshd for the user `batch`, all in a Debian
# bookworm root filesystem run inside a network namespace this script makes.
#
# usage: pbs.sh up|down|status|stop-server|start-server|qmgr COMMAND|qrerun JOB
#
#   up      build the root filesystem once (cached under $TESTBED_DIR/pbs/rootfs and reused
#           by every later `up`, like kube's binaries): debootstrap, the Debian packages
#           OpenPBS's INSTALL lists, then OpenPBS itself compiled from the pinned source
#           archive ($BATCHBRIDGE_PBS_SOURCE, default sources/ beside this script,
#           see find_source) and installed into /opt/pbs of the root filesystem.
#           Make the network namespace (a veth pair with a private /30) and a UTS namespace
#           whose host name is `pbs`; mount the root filesystem; create the user `batch`
#           reached with the sshd component's client key; start PBS and sshd inside; turn job
#           history on; run a job as `batch` through ssh until `qstat -x` shows it finished;
#           write facts.json. Idempotent; quick when already up.
#   down    stop every process in the root filesystem, unmount it, remove both namespaces.
#           The root filesystem (with the PBS build) is kept.
#   status  print whether it is up; exit 0 if up, 1 if not.
#   stop-server, start-server   stop (qterm: running jobs go on) or start pbs_server alone,
#           for the fault tests: qsub and qstat fail while it is down.
#   qmgr COMMAND   run one qmgr command as root, for the tests that change a queue (the
#           refusal tests close their own queue and open it again).
#   qrerun JOB     put running job JOB back in its queue as an administrator would (qrerun
#           needs operator or manager rights), for the conformance suite's requeue check.
#
# Why a root filesystem and namespaces. PBS refuses loopback addresses ("Could not find any
# usable IP address"), and test traffic may only go to loopback or to test hosts in network
# namespaces the test bed makes: so PBS and its sshd live in the network namespace
# $NETNS, on $PBS_ADDR, reached from the host through the veth pair. The root filesystem
# keeps PBS out of the host: `make install` writes /etc/profile.d/pbs.sh (qsub and qstat in
# every login shell's PATH), /etc/pbs.conf and /opt/pbs, and PBS needs a PostgreSQL server;
# in the root filesystem none of that reaches the other backends' login shells or the
# host's packages. Inside it, /opt/pbs/bin is linked into /usr/local/bin, so `sh -c`
# through ssh (no login shell) finds the commands too. The UTS namespace gives PBS a host
# name of its own (`pbs`, mapped to $PBS_ADDR in the root filesystem's /etc/hosts) whatever
# the machine is called.
#
# What tests get ($TESTBED_DIR/pbs/facts.json):
#   {"host":"10.250.19.2","port":22,"user":"batch","private_key":"...","known_hosts":"...",
#    "server":"pbs","capped_queue":"capped","capped_max_queued":10}
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

# The OpenPBS source: commit cd7ab5edaf03dcac2f1cb9e2f42d75eb117d468a of
# github.com/openpbs/openpbs as `git archive` made it (pbs_version 23.06.06).
SOURCE_ARCHIVE=openpbs-cd7ab5e.tar.gz
SOURCE_SHA256=60230d9d364904ba51a2a6c8033d6b58e06ad350080a63bdd46a70baf54bfab8
SUITE=bookworm
MIRROR=http://deb.debian.org/debian

NETNS=batchbridge-pbs
VETH_HOST=bbpbs0
VETH_NS=bbpbs1
HOST_ADDR=10.250.19.1
PBS_ADDR=10.250.19.2
PBS_HOST=pbs
SSH_PORT=22
SSH_USER=batch

PBS_DIR="$TESTBED_DIR/pbs"
ROOTFS="$PBS_DIR/rootfs"
READY_MARK="$ROOTFS/.batchbridge-ready"
BUILD_LOG="$PBS_DIR/build.log"
# The UTS namespace is kept alive by a bind mount of its handle, as `ip netns` does.
UTS_DIR=/run/batchbridge-pbs
UTS_HANDLE="$UTS_DIR/uts"
CLIENT_KEY="$TESTBED_DIR/ssh/id_ed25519"
HOST_KEY="$PBS_DIR/ssh_host_ed25519_key"
KNOWN_HOSTS="$PBS_DIR/known_hosts"
FACTS="$PBS_DIR/facts.json"
LOCK_FILE="$PBS_DIR/.lock"
# Paths inside the root filesystem.
SSHD_CONFIG=/etc/batchbridge/sshd_config
SSHD_LOG=/var/log/batchbridge-sshd.log
PBS_HOME=/var/spool/pbs

BUILD_PACKAGES=(gcc g++ make libtool autoconf automake libhwloc-dev libx11-dev libxt-dev
    libedit-dev libical-dev ncurses-dev perl postgresql-server-dev-all postgresql-contrib
    python3-dev tcl-dev tk-dev swig libexpat-dev libssl-dev libxext-dev libxft-dev
    libcjson-dev)
RUN_PACKAGES=(expat libedit2 postgresql python3 sudo tcl tk libical3 libcjson1 hostname
    procps openssh-server)

# in_root CMD... : CMD in the root filesystem, in the host's namespaces (for the build).
in_root() {
    chroot "$ROOTFS" "$@"
}

# in_pbs CMD... : CMD in the root filesystem, inside the PBS network and UTS namespaces.
in_pbs() {
    nsenter --net="/run/netns/$NETNS" --uts="$UTS_HANDLE" chroot "$ROOTFS" "$@"
}

ssh_batch() {
    ssh -F /dev/null -o UserKnownHostsFile="$KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR -o BatchMode=yes \
        -o IdentitiesOnly=yes -i "$CLIENT_KEY" -p "$SSH_PORT" "$SSH_USER@$PBS_ADDR" "$@" </dev/null
}

key_auth_ok() {
    [[ -r "$KNOWN_HOSTS" && -r "$CLIENT_KEY" ]] && ssh_batch true >/dev/null 2>&1
}

node_free() {
    in_pbs /opt/pbs/bin/pbsnodes "$PBS_HOST" 2>/dev/null | grep -q '^ *state = free'
}

server_answers() {
    in_pbs /opt/pbs/bin/qstat -B >/dev/null 2>&1
}

pbs_ok() {
    [[ -s "$FACTS" && -e "/run/netns/$NETNS" ]] && mountpoint -q "$UTS_HANDLE" &&
        key_auth_ok && server_answers && queues_ok
}

# The refusal tests' queues (batchbridge-pbs/tests/refusals.rs), used by no other test so
# that theirs never see a queue closed or a limit reached: `closable`, which they disable
# and enable again, and `onejob`, where a user may have one job (max_queued).
REFUSAL_QUEUES=(closable onejob)
# The capped drains' queue (submit limits hold jobs, issue 30): a user may have
# CAPPED_MAX_QUEUED jobs queued or running in it (max_queued), and only jobs sent to it see
# the limit.
CAPPED_QUEUE=capped
CAPPED_MAX_QUEUED=10

queues_ok() {
    local queue
    for queue in "${REFUSAL_QUEUES[@]}" "$CAPPED_QUEUE"; do
        in_pbs /opt/pbs/bin/qstat -Q "$queue" >/dev/null 2>&1 || return 1
    done
    in_pbs /opt/pbs/bin/qstat -Qf "$CAPPED_QUEUE" 2>/dev/null |
        grep -q "max_queued = \[u:PBS_GENERIC=$CAPPED_MAX_QUEUED\]"
}

ensure_queues() {
    local queue
    for queue in "${REFUSAL_QUEUES[@]}" "$CAPPED_QUEUE"; do
        in_pbs /opt/pbs/bin/qstat -Q "$queue" >/dev/null 2>&1 ||
            qmgr "create queue $queue queue_type = execution"
        # Enabled again in case a test was killed before it could.
        qmgr "set queue $queue enabled = True"
        qmgr "set queue $queue started = True"
    done
    qmgr 'set queue onejob max_queued = "[u:PBS_GENERIC=1]"'
    qmgr "set queue $CAPPED_QUEUE max_queued = \"[u:PBS_GENERIC=$CAPPED_MAX_QUEUED]\""
}

# The processes whose root directory is the root filesystem: daemons, sshd, jobs.
rootfs_pids() {
    local p
    for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/root" 2>/dev/null)" == "$ROOTFS" ]] && printf '%s\n' "${p#/proc/}"
    done
    return 0
}

# find_source : print the path of the pinned source archive: $BATCHBRIDGE_PBS_SOURCE, or
# the copy in sources/ beside this script (see sources/README.md).
find_source() {
    local candidate=${BATCHBRIDGE_PBS_SOURCE:-$HERE/sources/$SOURCE_ARCHIVE}
    [[ -r "$candidate" ]] ||
        die "OpenPBS source archive $candidate not found: set BATCHBRIDGE_PBS_SOURCE to the path of $SOURCE_ARCHIVE"
    [[ "$(sha256sum <"$candidate" | cut -d' ' -f1)" == "$SOURCE_SHA256" ]] ||
        die "$candidate is not the pinned $SOURCE_ARCHIVE (sha256 differs)"
    printf '%s\n' "$candidate"
}

build_rootfs() {
    local source started=$SECONDS step
    source="$(find_source)"
    apt_install debootstrap
    if mountpoint -q "$ROOTFS"; then
        die "$ROOTFS is mounted but not complete; run 'pbs.sh down' first"
    fi
    rm -rf "$ROOTFS"
    : >"$BUILD_LOG"
    log "pbs: debootstrap $SUITE into $ROOTFS (log: $BUILD_LOG)"
    debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >>"$BUILD_LOG" 2>&1 ||
        { tail -n 20 "$BUILD_LOG" >&2; die "debootstrap failed"; }
    mount_rootfs
    # No service may start while packages install.
    printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
    chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
    step=$SECONDS
    log "pbs: installing OpenPBS's build and run-time packages in the root filesystem"
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Retries=3 update \
        >>"$BUILD_LOG" 2>&1 || { tail -n 20 "$BUILD_LOG" >&2; die "apt-get update failed"; }
    in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Acquire::Retries=3 install \
        --no-install-recommends "${BUILD_PACKAGES[@]}" "${RUN_PACKAGES[@]}" >>"$BUILD_LOG" 2>&1 ||
        { tail -n 20 "$BUILD_LOG" >&2; die "apt-get install failed"; }
    in_root apt-get clean
    log "pbs: packages installed in $((SECONDS - step))s"
    step=$SECONDS
    log "pbs: building OpenPBS from $source"
    rm -rf "$ROOTFS/usr/src/openpbs"
    tar -xzf "$source" -C "$ROOTFS/usr/src"
    # A plain system PATH: configure hard-codes the first python3 it finds.
    # shellcheck disable=SC2016 # expanded by the root filesystem's shell
    in_root env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root sh -ec '
        cd /usr/src/openpbs
        ./autogen.sh
        ./configure --prefix=/opt/pbs --with-python=/usr
        make -j"$(nproc)"
        make install
        /opt/pbs/libexec/pbs_postinstall
    ' >>"$BUILD_LOG" 2>&1 || { tail -n 30 "$BUILD_LOG" >&2; die "building OpenPBS failed"; }
    rm -rf "$ROOTFS/usr/src/openpbs"
    # The init script thinks it runs at boot (and starts in the background) while a systemd
    # unit is registered; no systemd runs here.
    rm -f "$ROOTFS/etc/systemd/system/multi-user.target.wants/pbs.service"
    chmod 4755 "$ROOTFS/opt/pbs/sbin/pbs_iff" "$ROOTFS/opt/pbs/sbin/pbs_rcp"
    log "pbs: OpenPBS built and installed in $((SECONDS - step))s"
    touch "$READY_MARK"
    log "pbs: root filesystem ready in $((SECONDS - started))s"
}

mount_rootfs() {
    mountpoint -q "$ROOTFS" || mount --bind "$ROOTFS" "$ROOTFS"
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    if ! mountpoint -q "$ROOTFS/dev"; then
        mount --rbind /dev "$ROOTFS/dev"
        mount --make-rslave "$ROOTFS/dev"
    fi
    mountpoint -q "$ROOTFS/sys" || mount -t sysfs sysfs "$ROOTFS/sys"
    cp /etc/resolv.conf "$ROOTFS/etc/"
    printf '127.0.0.1\tlocalhost\n%s\t%s\n' "$PBS_ADDR" "$PBS_HOST" >"$ROOTFS/etc/hosts"
}

unmount_rootfs() {
    local path
    for path in "$ROOTFS/sys" "$ROOTFS/dev" "$ROOTFS/proc" "$ROOTFS"; do
        if mountpoint -q "$path"; then
            umount -R "$path" || umount -R -l "$path"
        fi
    done
}

# ensure_namespaces : the network namespace with its end of the veth pair on $PBS_ADDR, and
# the UTS namespace named $PBS_HOST.
ensure_namespaces() {
    if [[ ! -e "/run/netns/$NETNS" ]]; then
        log "pbs: network namespace $NETNS, $HOST_ADDR <-> $PBS_ADDR"
        ip netns add "$NETNS"
    fi
    ip -n "$NETNS" link set lo up
    if ! ip link show "$VETH_HOST" >/dev/null 2>&1; then
        ip link add "$VETH_HOST" type veth peer name "$VETH_NS" netns "$NETNS"
    fi
    ip addr replace "$HOST_ADDR/30" dev "$VETH_HOST"
    ip link set "$VETH_HOST" up
    ip -n "$NETNS" addr replace "$PBS_ADDR/30" dev "$VETH_NS"
    ip -n "$NETNS" link set "$VETH_NS" up
    if ! mountpoint -q "$UTS_HANDLE"; then
        install -d -m 755 "$UTS_DIR"
        touch "$UTS_HANDLE"
        unshare --uts="$UTS_HANDLE" hostname "$PBS_HOST"
    fi
}

remove_namespaces() {
    if mountpoint -q "$UTS_HANDLE"; then
        umount "$UTS_HANDLE"
    fi
    rm -rf "$UTS_DIR"
    if ip link show "$VETH_HOST" >/dev/null 2>&1; then
        ip link del "$VETH_HOST"
    fi
    if [[ -e "/run/netns/$NETNS" ]]; then
        ip netns del "$NETNS"
    fi
}

ensure_user() {
    in_root id -u "$SSH_USER" >/dev/null 2>&1 ||
        in_root useradd --create-home --shell /bin/bash "$SSH_USER"
    # useradd leaves the account locked, and sshd (UsePAM no) refuses locked accounts.
    in_root usermod -p '*' "$SSH_USER"
    in_root install -d -o "$SSH_USER" -g "$SSH_USER" -m 700 "/home/$SSH_USER/.ssh"
    install -m 600 "$CLIENT_KEY.pub" "$ROOTFS/home/$SSH_USER/.ssh/authorized_keys"
    in_root chown "$SSH_USER:$SSH_USER" "/home/$SSH_USER/.ssh/authorized_keys"
}

configure() {
    # PBS's commands on the PATH of a non-login shell (what ssh runs commands in).
    local command
    for command in "$ROOTFS"/opt/pbs/bin/*; do
        ln -sfn "/opt/pbs/bin/${command##*/}" "$ROOTFS/usr/local/bin/${command##*/}"
    done
    ensure_keypair "$HOST_KEY" batchbridge-testbed-pbs-host
    install -d -m 755 "$ROOTFS/etc/batchbridge" "$ROOTFS/run/sshd"
    install -m 600 "$HOST_KEY" "$ROOTFS/etc/batchbridge/ssh_host_ed25519_key"
    printf '%s %s\n' "$PBS_ADDR" "$(awk '{print $1, $2}' "$HOST_KEY.pub")" >"$KNOWN_HOSTS"
    chmod 644 "$KNOWN_HOSTS"
    cat >"$ROOTFS$SSHD_CONFIG" <<EOF
# Generated by tests/testbed/pbs.sh.
ListenAddress $PBS_ADDR
Port $SSH_PORT
HostKey /etc/batchbridge/ssh_host_ed25519_key
PidFile /run/batchbridge-sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowUsers $SSH_USER
MaxStartups 200:30:400
MaxSessions 200
UseDNS no
PrintMotd no
EOF
    in_root /usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "sshd -t rejected $SSHD_CONFIG"
    cat >"$ROOTFS/etc/pbs.conf" <<EOF
PBS_EXEC=/opt/pbs
PBS_HOME=$PBS_HOME
PBS_SERVER=$PBS_HOST
PBS_LEAF_NAME=$PBS_HOST
PBS_MOM_NODE_NAME=$PBS_HOST
PBS_START_SERVER=1
PBS_START_SCHED=1
PBS_START_COMM=1
PBS_START_MOM=1
PBS_CORE_LIMIT=unlimited
PBS_SCP=/usr/bin/scp
EOF
}

# configure_mom : the mom copies output files locally ($usecp) instead of through pbs_rcp,
# and checks running jobs' limits every 1-2 s instead of 10-120 s (walltime tests).
configure_mom() {
    local config="$ROOTFS$PBS_HOME/mom_priv/config" line changed=0
    for line in '$usecp *:/ /' '$min_check_poll 1' '$max_check_poll 2'; do
        if ! grep -qxF "$line" "$config"; then
            printf '%s\n' "$line" >>"$config"
            changed=1
        fi
    done
    if ((changed)); then
        in_pbs sh -c 'kill -HUP "$(cat '"$PBS_HOME"'/mom_priv/mom.lock)"'
    fi
}

sshd_running() {
    local pid
    pid="$( (tr -dc '0-9' <"$ROOTFS/run/batchbridge-sshd.pid") 2>/dev/null || true)"
    [[ -n "$pid" ]] && ! process_gone "$pid" &&
        [[ "$(readlink "/proc/$pid/root" 2>/dev/null)" == "$ROOTFS" ]]
}

qmgr() {
    in_pbs /opt/pbs/bin/qmgr -c "$1" >/dev/null
}

# A job left by an earlier life of the test bed (the database keeps it, the mom reruns it)
# can hold every CPU, and the node would never be free. Nothing of a test run outlives it.
purge_leftover_jobs() {
    local jobs
    jobs=$(in_pbs /opt/pbs/bin/qselect 2>/dev/null) || return 0
    [[ -n $jobs ]] || return 0
    log "pbs: removing $(wc -w <<<"$jobs") job(s) left by an earlier run"
    # shellcheck disable=SC2086 # one argument per job id
    in_pbs /opt/pbs/bin/qdel -W force $jobs >/dev/null 2>&1 || true
}

start_daemons() {
    if ! sshd_running; then
        log "pbs: starting sshd on $PBS_ADDR:$SSH_PORT"
        in_pbs /usr/sbin/sshd -f "$SSHD_CONFIG" -E "$SSHD_LOG" {lock_fd}>&- </dev/null
    fi
    if ! server_answers; then
        log "pbs: starting PBS (log: $PBS_DIR/start.log)"
        in_pbs /etc/init.d/pbs start {lock_fd}>&- </dev/null >>"$PBS_DIR/start.log" 2>&1 ||
            { tail -n 30 "$PBS_DIR/start.log" >&2; die "PBS did not start"; }
    fi
    WAIT_FOR_SLEEP=0.5 wait_for 60 "key login to $SSH_USER@$PBS_ADDR:$SSH_PORT" key_auth_ok ||
        die "sshd in the root filesystem does not accept the key (log: $ROOTFS$SSHD_LOG)"
    WAIT_FOR_SLEEP=0.5 wait_for 60 "pbs_server to answer" server_answers ||
        die "pbs_server does not answer (logs: $ROOTFS$PBS_HOME/server_logs)"
    configure_mom
    # History makes finished jobs visible to qstat -x; never toggled off (that drops it all).
    if ! in_pbs /opt/pbs/bin/qmgr -c 'list server job_history_enable' 2>/dev/null |
        grep -q 'job_history_enable = True'; then
        qmgr 'set server job_history_enable = True'
    fi
    qmgr 'set server job_history_duration = 24:00:00'
    # The default 600 s cycle leaves a job submitted before the mom reported waiting.
    qmgr 'set server scheduler_iteration = 5'
    # 16 CPUs on 2 cores, like the SLURM node: many short test jobs run at once.
    qmgr "set node $PBS_HOST resources_available.ncpus = 16"
    purge_leftover_jobs
    WAIT_FOR_SLEEP=0.5 wait_for 120 "node $PBS_HOST to be free" node_free ||
        die "node $PBS_HOST is not free (logs: $ROOTFS$PBS_HOME/mom_logs)"
    qmgr 'set server scheduling = True'
    ensure_queues
}

# job_finished ID : true once qstat -x says job ID finished.
job_finished() {
    ssh_batch qstat -x -f -F json "$1" 2>/dev/null | grep -q '"job_state":[[:space:]]*"F"'
}

# A job as `batch` over ssh, until qstat -x says it finished.
end_to_end_check() {
    local id
    id="$(ssh_batch 'cd /tmp && qsub -f -- /bin/true')"
    [[ "$id" =~ ^[0-9]+\.$PBS_HOST$ ]] || die "qsub as $SSH_USER printed '$id'"
    WAIT_FOR_SLEEP=0.5 wait_for 120 "job $id to finish" job_finished "$id" ||
        die "a test job did not finish (see qstat -x -f $id)"
    log "pbs: as $SSH_USER via ssh: job $id finished"
}

write_facts() {
    printf '{"host":"%s","port":%d,"user":"%s","private_key":"%s","known_hosts":"%s","server":"%s","capped_queue":"%s","capped_max_queued":%d}\n' \
        "$PBS_ADDR" "$SSH_PORT" "$SSH_USER" "$(json_escape "$CLIENT_KEY")" \
        "$(json_escape "$KNOWN_HOSTS")" "$PBS_HOST" "$CAPPED_QUEUE" "$CAPPED_MAX_QUEUED" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$PBS_DIR"
    lock_component "$LOCK_FILE" "$FIRST_BUILD_WAIT"
}

cmd_up() {
    if pbs_ok; then
        log "pbs: already up on $PBS_ADDR:$SSH_PORT"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "pbs.sh up must run as root"
    [[ -r "$CLIENT_KEY.pub" ]] || die "$CLIENT_KEY.pub missing: run 'sshd.sh up' first"
    local started=$SECONDS
    command -v nsenter >/dev/null || apt_install util-linux
    command -v ip >/dev/null || apt_install iproute2
    take_lock
    if pbs_ok; then
        log "pbs: already up on $PBS_ADDR:$SSH_PORT"
        return 0
    fi
    [[ -e "$READY_MARK" ]] || build_rootfs
    mount_rootfs
    ensure_namespaces
    ensure_user
    configure
    start_daemons
    end_to_end_check
    write_facts
    log "pbs: up on $PBS_ADDR:$SSH_PORT in $((SECONDS - started))s, facts: $FACTS"
}

cmd_down() {
    local pids
    if [[ -d "$PBS_DIR" ]]; then
        take_lock
    fi
    if [[ -e "$READY_MARK" ]] && mountpoint -q "$ROOTFS/proc" && mountpoint -q "$UTS_HANDLE" &&
        [[ -e "/run/netns/$NETNS" ]]; then
        in_pbs /etc/init.d/pbs stop >>"$PBS_DIR/start.log" 2>&1 || true
    fi
    mapfile -t pids < <(rootfs_pids)
    if ((${#pids[@]} > 0)); then
        log "pbs: stopping ${#pids[@]} processes in the root filesystem"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        sleep 1
        mapfile -t pids < <(rootfs_pids)
        ((${#pids[@]} == 0)) || kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    unmount_rootfs
    remove_namespaces
    log "pbs: down (root filesystem with the PBS build kept in $ROOTFS)"
}

cmd_status() {
    if pbs_ok; then
        echo "pbs: up on $PBS_ADDR:$SSH_PORT, facts: $FACTS"
        return 0
    fi
    echo "pbs: down"
    return 1
}

# Fault-test controls. They wait until the server is really gone or back.
cmd_stop_server() {
    in_pbs /opt/pbs/bin/qterm -t quick >/dev/null
    WAIT_FOR_SLEEP=0.5 wait_for 60 "pbs_server to stop" server_gone ||
        die "pbs_server did not stop"
    log "pbs: pbs_server stopped"
}

cmd_start_server() {
    in_pbs /opt/pbs/sbin/pbs_server </dev/null >/dev/null 2>&1
    WAIT_FOR_SLEEP=0.5 wait_for 120 "pbs_server to answer" server_answers ||
        die "pbs_server did not come back"
    log "pbs: pbs_server started"
}

server_gone() { ! server_answers && ! in_pbs pgrep -x pbs_server >/dev/null; }

case "${1:-}" in
qmgr) in_pbs /opt/pbs/bin/qmgr -c "${2:?usage: pbs.sh qmgr COMMAND}" ;;
qrerun) in_pbs /opt/pbs/bin/qrerun "${2:?usage: pbs.sh qrerun JOB}" ;;
stop-server) cmd_stop_server ;;
start-server) cmd_start_server ;;
*) component_main "$@" ;;
esac
