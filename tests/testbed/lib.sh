#!/usr/bin/env bash
# shellcheck shell=bash
# Shared helpers for the batchbridge test bed scripts.
#
# Source this file; it does not change shell options itself and is safe to use
# under `set -euo pipefail`.

TESTBED_DIR="${BATCHBRIDGE_TESTBED_DIR:-/var/lib/batchbridge-testbed}"
export TESTBED_DIR

# log MESSAGE... : print a tagged message to stderr.
log() {
    printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2
}

# die MESSAGE... : log and exit non-zero.
die() {
    log "ERROR: $*"
    exit 1
}

# wait_for TRIES DESCRIPTION CMD [ARGS...]
# Run CMD until it succeeds, at most TRIES times, sleeping WAIT_FOR_SLEEP
# seconds (default 0.2) between attempts. Returns 1 with a clear message if it
# never succeeds.
wait_for() {
    local tries="$1" what="$2" i
    shift 2
    for ((i = 1; i <= tries; i++)); do
        if "$@"; then
            return 0
        fi
        if ((i < tries)); then
            sleep "${WAIT_FOR_SLEEP:-0.2}"
        fi
    done
    log "ERROR: timed out waiting for ${what} (${tries} tries): $*"
    return 1
}

# pkg_installed PKG : true if the Debian package PKG is installed.
pkg_installed() {
    local status
    status="$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)"
    [[ "$status" == installed ]]
}

_TESTBED_APT_UPDATED=0
_TESTBED_POLICY_RCD=/usr/sbin/policy-rc.d

# _policy_rcd_denies : true if policy-rc.d exists and forbids service starts.
_policy_rcd_denies() {
    local rc=0
    [[ -x "$_TESTBED_POLICY_RCD" ]] || return 1
    "$_TESTBED_POLICY_RCD" testbed start >/dev/null 2>&1 || rc=$?
    ((rc == 101))
}

# apt_install PKG... : install the given Debian packages if any is missing.
# Runs `apt-get update` at most once per shell, and only when something has to
# be installed. A policy-rc.d exiting 101 is in place during the install so
# that packages do not try to start their services; a pre-existing policy-rc.d
# is left as is (if it already denies) or restored afterwards.
apt_install() {
    local missing=() pkg rc=0 backup=""
    for pkg in "$@"; do
        pkg_installed "$pkg" || missing+=("$pkg")
    done
    ((${#missing[@]} > 0)) || return 0

    log "installing: ${missing[*]}"
    local created_policy=0
    if ! _policy_rcd_denies; then
        if [[ -e "$_TESTBED_POLICY_RCD" ]]; then
            backup="${_TESTBED_POLICY_RCD}.testbed-backup"
            mv -f "$_TESTBED_POLICY_RCD" "$backup"
        fi
        printf '#!/bin/sh\n# installed by batchbridge tests/testbed/lib.sh\nexit 101\n' \
            >"$_TESTBED_POLICY_RCD"
        chmod 755 "$_TESTBED_POLICY_RCD"
        created_policy=1
    fi

    export DEBIAN_FRONTEND=noninteractive
    if ((_TESTBED_APT_UPDATED == 0)); then
        apt-get -q -o Acquire::Retries=3 update >&2 || rc=$?
        ((rc != 0)) || _TESTBED_APT_UPDATED=1
    fi
    if ((rc == 0)); then
        apt-get -q -y -o Acquire::Retries=3 install --no-install-recommends \
            "${missing[@]}" >&2 || rc=$?
    fi

    if ((created_policy)); then
        rm -f "$_TESTBED_POLICY_RCD"
        if [[ -n "$backup" ]]; then
            mv -f "$backup" "$_TESTBED_POLICY_RCD"
        fi
    fi
    if ((rc != 0)); then
        log "ERROR: apt-get failed (exit $rc) installing: ${missing[*]}"
        return "$rc"
    fi
}

# json_escape STRING : print STRING escaped for use inside a JSON string.
json_escape() {
    local s="$1"
    s="${s//\\/\\\\}"
    s="${s//\"/\\\"}"
    printf '%s' "$s"
}

# Every test bed component (tests/testbed/NAME.sh, understanding up|down|status), in start
# order; down.sh stops them in reverse. Later components may depend on earlier ones.
TESTBED_COMPONENTS=(
    sshd
    otp
    bastion
    ca
    kdc
    at
    tsp
    slurm
    htcondor
    slurm2
    pbs
    kube
    seaweedfs
)

# choose_components [NAME...]: sets COMPONENTS to the names given, or to every component.
# shellcheck disable=SC2034 # COMPONENTS is read by up.sh and down.sh
choose_components() {
    if (($# > 0)); then
        COMPONENTS=("$@")
    else
        COMPONENTS=("${TESTBED_COMPONENTS[@]}")
    fi
}

# ensure_secret_file PATH: a random 24-character alphanumeric secret in PATH (mode 600),
# made once and kept.
ensure_secret_file() {
    local path=$1 secret
    if [[ ! -s "$path" ]]; then
        secret="$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | cut -c1-24)"
        [[ ${#secret} -ge 16 ]] || die "could not generate a secret for $path"
        (umask 077 && printf '%s' "$secret" >"$path")
    fi
    chmod 600 "$path"
}

# process_gone PID : true once PID has exited (a zombie counts as gone: PID 1
# in containers does not always reap promptly).
process_gone() {
    local state
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
    [[ -z "$state" || "$state" == Z ]]
}

# Daemons a component script runs itself, as PID 1 need not be systemd. The script sets
# COMPONENT_NAME (for messages) and DAEMON_DIR (holds NAME.pid and NAME.log), defines
# `daemon_is NAME PID` and keeps the descriptor of any lock it holds in lock_fd.

# pid_file NAME / log_file NAME : where daemon NAME's pid and output go.
pid_file() { printf '%s/%s.pid\n' "$DAEMON_DIR" "$1"; }
log_file() { printf '%s/%s.log\n' "$DAEMON_DIR" "$1"; }

# daemon_pid NAME : print the pid from NAME.pid if that process is alive and daemon_is
# accepts it (guards against stale pid files and reused pids).
daemon_pid() {
    local name="$1" file pid
    file="$(pid_file "$name")"
    [[ -r "$file" ]] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    [[ -n "$pid" ]] || return 1
    daemon_is "$name" "$pid" || return 1
    ! process_gone "$pid" || return 1
    printf '%s\n' "$pid"
}

# start_daemon NAME CMD [ARGS...] : run CMD (which must stay in the foreground) detached in
# the background, output appended to NAME.log, pid written to NAME.pid.
start_daemon() {
    local name="$1" log
    shift
    log="$(log_file "$name")"
    # CMD shown without its directory: the header stays short when CMD is an absolute path.
    local shown=("${1##*/}" "${@:2}")
    printf '\n===== %s %s.sh: starting %s\n' "$(date '+%F %T')" "$COMPONENT_NAME" "${shown[*]}" \
        >>"$log"
    log "$COMPONENT_NAME: starting $name (log: $log)"
    (
        # Do not let the daemon inherit the lock: the next 'up' would block on it.
        if [[ -n "${lock_fd:-}" ]]; then
            exec {lock_fd}>&-
        fi
        exec setsid "$@" </dev/null >>"$log" 2>&1
    ) &
    printf '%s\n' "$!" >"$(pid_file "$name")"
}

# stop_daemon NAME SECONDS : SIGTERM the daemon from NAME.pid, SIGKILL it if it is still
# there after SECONDS, remove the pid file.
stop_daemon() {
    local name="$1" seconds="$2" pid
    if pid="$(daemon_pid "$name")"; then
        log "$COMPONENT_NAME: stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        if ! WAIT_FOR_SLEEP=0.1 wait_for $((seconds * 10)) "$name pid $pid to exit" \
            process_gone "$pid"; then
            log "$COMPONENT_NAME: $name pid $pid ignored SIGTERM for ${seconds}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            WAIT_FOR_SLEEP=0.1 wait_for 100 "$name pid $pid to die" process_gone "$pid"
        fi
    fi
    rm -f "$(pid_file "$name")"
}

# wait_daemon NAME SECONDS DESCRIPTION CMD [ARGS...] : run CMD until it succeeds; fail early
# (with the end of NAME's log) if NAME's process exits.
wait_daemon() {
    local name="$1" seconds="$2" what="$3" pid i tries
    shift 3
    pid="$(tr -dc '0-9' <"$(pid_file "$name")" 2>/dev/null || true)"
    tries=$((seconds * 5))
    for ((i = 1; i <= tries; i++)); do
        if "$@"; then
            return 0
        fi
        if [[ -z "$pid" ]] || process_gone "$pid"; then
            log "ERROR: $name (pid ${pid:-?}) exited while waiting for $what; end of $(log_file "$name"):"
            tail -n 30 "$(log_file "$name")" >&2 || true
            die "$name failed to start"
        fi
        sleep 0.2
    done
    log "ERROR: timed out after ${seconds}s waiting for $what; end of $(log_file "$name"):"
    tail -n 30 "$(log_file "$name")" >&2 || true
    die "$name did not become ready"
}

# ensure_keypair PATH COMMENT: an ed25519 key pair without passphrase, made once.
ensure_keypair() {
    local key=$1 comment=$2
    if [[ ! -s "$key" || ! -s "$key.pub" ]]; then
        log "generating key $key"
        rm -f "$key" "$key.pub"
        ssh-keygen -q -t ed25519 -N '' -C "$comment" -f "$key"
    fi
    chmod 600 "$key"
    chmod 644 "$key.pub"
}

# port_open PORT : true if something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# component_main ARG... : the entry point of a component script; runs its cmd_up, cmd_down
# or cmd_status as the first argument says.
component_main() {
    case "${1:-}" in
    up | down | status) "cmd_$1" ;;
    *)
        echo "usage: $0 up|down|status" >&2
        exit 2
        ;;
    esac
}

# find_go WHAT : print the go tool that builds WHAT; CI images put it in /usr/local/go/bin,
# not always on PATH.
find_go() {
    if command -v go >/dev/null; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    else
        die "the go tool is needed to build $1 (Debian's golang is too old; install Go >= 1.26)"
    fi
}

# go_in DIR ARGS... : $GO (from find_go) run in DIR with every cache inside the component's
# $BUILD_DIR, so a rebuild downloads and compiles nothing and CI can cache one directory;
# module-cache files stay writable so `rm -rf` works, and no toolchain is downloaded behind
# our back. Variables set for the call (GOBIN=...) reach go.
go_in() {
    local dir="$1"
    shift
    (cd "$dir" && env GOMODCACHE="$BUILD_DIR/gomodcache" GOCACHE="$BUILD_DIR/gocache" \
        GOFLAGS="-trimpath -modcacherw -buildvcs=false" GOTOOLCHAIN=local GOWORK=off \
        GO111MODULE=on CGO_ENABLED=0 "$GO" "$@")
}

# go_logged DIR ARGS... : go_in with its output in the component's $BUILD_LOG, shown only on
# failure.
go_logged() {
    printf '\n===== %s go %s\n' "$(date '+%F %T')" "${*:2}" >>"$BUILD_LOG"
    if ! go_in "$@" >>"$BUILD_LOG" 2>&1; then
        tail -n 30 "$BUILD_LOG" >&2
        die "go ${*:2} failed (log: $BUILD_LOG)"
    fi
}

# lock_component LOCK_FILE [SECONDS] : take the component's lock, waiting 10 minutes (or
# SECONDS) at most, so two runs of one component's up or down do not interleave. The
# descriptor stays open in lock_fd until the script exits; the daemons started under it
# close it (else the next run would wait for them).
lock_component() {
    exec {lock_fd}>"$1"
    flock -w "${2:-600}" "$lock_fd" || die "could not lock $1"
}

# A first build takes minutes: a component that builds waits that long for one under way
# rather than build twice.
# shellcheck disable=SC2034 # read by helm.sh, kube.sh, pbs.sh and seaweedfs.sh
FIRST_BUILD_WAIT=1800

# Components that run an sshd of their own (a login or a jump host on 127.0.0.1, from an
# sshd_config under $TESTBED_DIR, never /etc/ssh) build it from the helpers below, so a fix
# for one (a new OpenSSH default, a limit the tests outgrow) reaches all of them.

# write_known_hosts FILE HOST PORT PUBLIC_KEY_FILE : FILE (mode 644) holds the one line by
# which a client trusts the key in PUBLIC_KEY_FILE for [HOST]:PORT. Written to a temporary
# file and renamed, so a test reading it meanwhile never sees half of it.
write_known_hosts() {
    local file=$1 host=$2 port=$3 public_key=$4
    printf '[%s]:%s %s\n' "$host" "$port" "$(awk '{print $1, $2}' "$public_key")" >"$file.tmp"
    chmod 644 "$file.tmp"
    mv -f "$file.tmp" "$file"
}

# ensure_wrong_known_hosts FILE HOST PORT : FILE (mode 644) trusts a throwaway key for
# [HOST]:PORT, made once; tests hand it to a client to see a host key mismatch refused.
ensure_wrong_known_hosts() {
    local file=$1 host=$2 port=$3 tmp
    if [[ ! -s "$file" ]]; then
        log "generating wrong known_hosts $file"
        tmp="$(mktemp -d)"
        ssh-keygen -q -t ed25519 -N '' -C batchbridge-testbed-wrong -f "$tmp/key"
        write_known_hosts "$file" "$host" "$port" "$tmp/key.pub"
        rm -rf "$tmp"
    fi
    chmod 644 "$file"
}

# sshd_config_common ADDRESS PORT HOST_KEY PID_FILE USER : the sshd_config lines every test
# bed sshd shares: where it listens, its host key and pid file ("none" for one that
# start_daemon runs in the foreground), USER as the only login (never root), room for the
# tests' many parallel connections and sessions, no DNS lookups (clients are on this host),
# nothing printed at login (tests read a command's output), no X11, and a log that says why
# a login was refused.
sshd_config_common() {
    printf '%s\n' "ListenAddress $1" "Port $2" "HostKey $3" "PidFile $4" \
        "PermitRootLogin no" "AllowUsers $5" \
        "MaxStartups 200:30:400" "MaxSessions 200" "UseDNS no" "PrintMotd no" \
        "PrintLastLog no" "X11Forwarding no" "LogLevel VERBOSE"
}

# sshd_no_penalties HOST_KEY : the line "PerSourcePenalties no" if this sshd knows the option
# (OpenSSH >= 9.8 shuts out a source after failed logins, and the tests fail logins from
# 127.0.0.1 on purpose), nothing for an older sshd, which would reject the line.
sshd_no_penalties() {
    if /usr/sbin/sshd -t -f /dev/null -h "$1" -o PerSourcePenalties=no >/dev/null 2>&1; then
        echo "PerSourcePenalties no"
    fi
}

# install_sshd_config FILE : FILE (mode 644) gets the sshd_config on standard input, renamed
# into place whole; dies if sshd -t rejects it, so 'up' stops at a bad config rather than at
# an sshd that will not start. Makes sshd's privilege separation directory (/run/sshd, gone
# after a reboot), which sshd -t needs too.
install_sshd_config() {
    local file=$1
    install -d -o root -g root -m 755 /run/sshd
    cat >"$file.tmp"
    chmod 644 "$file.tmp"
    mv -f "$file.tmp" "$file"
    /usr/sbin/sshd -t -f "$file" || die "sshd -t rejected $file"
}

# start_sshd PROGRAM ADDRESS PORT : (re)start the component's sshd that runs as a daemon of
# its own: PROGRAM (/usr/sbin/sshd, or a symlink to it whose name the process then has, for
# daemon_is and for the PAM service OpenSSH picks by that name) with the config
# $DAEMON_DIR/sshd_config, whose PidFile must be $DAEMON_DIR/sshd.pid (stop_daemon sshd and
# daemon_pid sshd read it), and its log in $DAEMON_DIR/sshd.log. A running one is stopped
# first, as it may have an old config or keys; dies if something else holds the port. Call
# it holding the component's lock (lock_component).
start_sshd() {
    local program=$1 address=$2 port=$3 log
    stop_daemon sshd 5
    ! port_open "$port" || die "something else already listens on $address:$port (not our sshd)"
    log="$(log_file sshd)"
    log "$COMPONENT_NAME: starting sshd on $address:$port (log: $log)"
    # sshd daemonizes itself (so not start_daemon); keep the lock's descriptor out of it.
    if ! "$program" -f "$DAEMON_DIR/sshd_config" -E "$log" {lock_fd}>&- </dev/null; then
        tail -n 20 "$log" >&2 || true
        die "${program##*/} failed to start"
    fi
}

# await_sshd WHAT PROBLEM CMD [ARGS...] : run CMD until it succeeds (about 10 s at most; a
# healthy sshd answers within one); else show the end of $DAEMON_DIR/sshd.log and die with
# PROBLEM.
await_sshd() {
    local what=$1 problem=$2
    shift 2
    if ! wait_for 50 "$what" "$@"; then
        tail -n 30 "$(log_file sshd)" >&2 || true
        die "$problem"
    fi
}
