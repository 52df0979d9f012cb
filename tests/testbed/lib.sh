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
    slurm
    htcondor
    kube
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
