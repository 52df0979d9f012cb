#!/usr/bin/env bash
# Test bed component: Debian's `at` (atd and its batch queue) on this machine, used as the
# user `batch` through the test bed sshd (sshd.sh) by the example custom backend
# (examples/at-backend).
#
# usage: at.sh up|down|status
#
#   up      install the `at` package if needed, let `batch` use at (listed in
#           /etc/at.allow), start atd in the foreground as a background process of this
#           script, run a batch job as `batch` through ssh until it has run, and write
#           $TESTBED_DIR/at/facts.json. Idempotent; returns quickly when already up.
#   down    stop atd (by its pid file). Queued jobs stay in at's spool.
#   status  print whether it is up; exit 0 if up, 1 if not.
#
# atd runs with `-l 1000 -b 0`: batch jobs start whatever the load average (this machine is
# shared with builds, and at's default limit of 1.5 would hold every job back) and one
# after another without at's default 60 s between them, so fifty jobs start in seconds.
# PID 1 need not be systemd. Requires the sshd component (sshd.sh up) for the user `batch`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

BATCH_USER="batch"
LOAD_LIMIT=1000
BATCH_INTERVAL=0
ATD_BIN=/usr/sbin/atd
AT_ALLOW=/etc/at.allow
SPOOL_DIR=/var/spool/cron/atjobs

COMPONENT_NAME=at
AT_DIR="$TESTBED_DIR/at"
DAEMON_DIR="$AT_DIR"
FACTS="$AT_DIR/facts.json"
LOCK_FILE="$AT_DIR/.lock"
SSH_FACTS="$TESTBED_DIR/ssh/facts.json"

lock_fd=""

# daemon_is NAME PID : true if PID's process is called NAME.
daemon_is() {
    local comm
    comm="$(cat "/proc/$2/comm" 2>/dev/null || true)"
    [[ "$comm" == "$1" ]]
}

# ssh_fact KEY : a value from the sshd component's facts.json.
ssh_fact() {
    sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$SSH_FACTS"
}

# ssh_batch COMMAND : COMMAND as `batch` through the test bed sshd, with the client key.
ssh_batch() {
    ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes \
        -o UserKnownHostsFile="$(ssh_fact known_hosts)" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR \
        -i "$(ssh_fact private_key)" -p "$(ssh_fact port)" \
        "$(ssh_fact user)@$(ssh_fact host)" "$1" </dev/null
}

# at_version : what `at -V` says, e.g. `3.2.5`.
at_version() {
    at -V 2>&1 | sed -n 's/^at version \([^ ]*\).*/\1/p'
}

atd_ok() {
    daemon_pid atd >/dev/null
}

allowed_ok() {
    grep -qxF "$BATCH_USER" "$AT_ALLOW" 2>/dev/null
}

up_ok() {
    [[ -s "$FACTS" ]] && allowed_ok && atd_ok
}

# ensure_allowed : `batch` may use at. With an at.allow only the users it lists may; at.deny
# is then not read.
ensure_allowed() {
    allowed_ok && return 0
    log "at: allowing $BATCH_USER in $AT_ALLOW"
    printf '%s\n' "$BATCH_USER" >>"$AT_ALLOW"
    chown root:daemon "$AT_ALLOW"
    chmod 640 "$AT_ALLOW"
}

ensure_atd() {
    atd_ok && return 0
    # atd keeps its own pid file and refuses to start while it names a live atd: one this
    # script did not start (the packaged service) is left alone.
    local other
    other="$(tr -dc '0-9' </run/atd.pid 2>/dev/null || true)"
    if [[ -n "$other" ]] && daemon_is atd "$other" && ! process_gone "$other"; then
        die "an atd this script did not start runs (pid $other, /run/atd.pid); stop it first"
    fi
    # Jobs marked running (`=`) by an atd that is gone never finish: drop them as the
    # packaged service does before it starts atd.
    rm -f /run/atd.pid
    find "$SPOOL_DIR" -type f -name '=*' -delete
    start_daemon atd "$ATD_BIN" -f -l "$LOAD_LIMIT" -b "$BATCH_INTERVAL"
    wait_daemon atd 10 "atd's pid file" test -s /run/atd.pid
}

# prove_job_via_ssh : as `batch`, through the test bed sshd, queue a batch job and wait until
# it has run.
prove_job_via_ssh() {
    [[ -s "$SSH_FACTS" ]] || die "$SSH_FACTS missing: run tests/testbed/sshd.sh up first"
    # shellcheck disable=SC2016 # runs in the remote shell
    local remote='set -e
mark=$(mktemp -u "$HOME/.at-testbed-check.XXXXXX")
echo "touch $mark" | batch 2>/dev/null
for i in $(seq 1 300); do
    if [ -e "$mark" ]; then rm -f "$mark"; echo "batch job ran"; exit 0; fi
    sleep 0.1
done
echo "batch job did not run within 30 s; atq:"; atq
exit 1'
    local out
    if ! out="$(ssh_batch "$remote" 2>&1)"; then
        log "ERROR: a batch job as $BATCH_USER via ssh failed: $out"
        die "at does not run jobs for $BATCH_USER through ssh (see $(log_file atd))"
    fi
    log "at: as $BATCH_USER via ssh: $out"
}

write_facts() {
    printf '{"version":"%s","user":"%s","load_limit":%d,"batch_interval":%d}\n' \
        "$(json_escape "$(at_version)")" "$(json_escape "$BATCH_USER")" "$LOAD_LIMIT" \
        "$BATCH_INTERVAL" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

take_lock() {
    install -d -m 755 "$TESTBED_DIR" "$AT_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
}

cmd_up() {
    if up_ok; then
        log "at: already up (atd pid $(daemon_pid atd))"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "at.sh up must run as root"
    take_lock
    # Someone else may have brought it up while we waited for the lock.
    if up_ok; then
        log "at: already up (atd pid $(daemon_pid atd))"
        return 0
    fi
    [[ -x "$ATD_BIN" ]] || apt_install at
    id -u "$BATCH_USER" >/dev/null 2>&1 || die "no user $BATCH_USER: run tests/testbed/sshd.sh up first"
    ensure_allowed
    ensure_atd
    prove_job_via_ssh
    write_facts
    log "at: up (at $(at_version), atd pid $(daemon_pid atd)), facts: $FACTS"
}

cmd_down() {
    [[ -d "$AT_DIR" ]] && take_lock
    stop_daemon atd 10
    log "at: down"
}

cmd_status() {
    local pid
    if up_ok; then
        echo "at: up (at $(at_version), atd pid $(daemon_pid atd)), facts: $FACTS"
        return 0
    fi
    if pid="$(daemon_pid atd)"; then
        echo "at: atd running (pid $pid) but not set up; run at.sh up"
    else
        echo "at: down"
    fi
    return 1
}

component_main "$@"
