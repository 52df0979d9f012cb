#!/usr/bin/env bash
# Test bed component: a test OpenSSH user CA and a login sshd on 127.0.0.1:2233 that accepts
# only certificates that CA signed (issue 29, point 3).
#
# usage: ca.sh up|down|status
#
#   up      make the CA, a user key, a host key and known_hosts under $TESTBED_DIR/ca; issue
#           the user key two certificates (one already expired, one valid for a day; the
#           day one again when less than 12 h of it are left); start the sshd; check that
#           the day certificate logs in and the key alone and the expired certificate do
#           not; write facts.json. Idempotent; returns quickly when already up.
#   down    stop that sshd (by its pid file); generated files are kept.
#   status  print whether it is up; exit 0 if up, 1 if not.
#
# The sshd runs on this host, so `batch` reaches the same SLURM commands through it as
# through sshd.sh's login on :2222; it needs sshd.sh's `batch` user (an earlier component).
# Tests issue their own short certificates with the CA key facts.json names:
#   ssh-keygen -q -s CA_KEY -I test -n batch -V +2m USER_KEY.pub
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

CA_HOST=127.0.0.1
CA_PORT=2233
CA_USER=batch
SSHD_BIN=/usr/sbin/sshd

CA_DIR="$TESTBED_DIR/ca"
CA_KEY="$CA_DIR/user_ca"
USER_KEY="$CA_DIR/id_ed25519"
# Beside the key under OpenSSH's own name, so `ssh -i USER_KEY` finds it by itself.
DAY_CERT="$USER_KEY-cert.pub"
EXPIRED_CERT="$CA_DIR/expired-cert.pub"
HOST_KEY="$CA_DIR/ssh_host_ed25519_key"
KNOWN_HOSTS="$CA_DIR/known_hosts"
SSHD_CONFIG="$CA_DIR/sshd_config"
SSHD_PID_FILE="$CA_DIR/sshd.pid"
SSHD_LOG="$CA_DIR/sshd.log"
FACTS="$CA_DIR/facts.json"
LOCK_FILE="$CA_DIR/.lock"
PRIVSEP_DIR=/run/sshd
# The day certificate is issued again when less than this is left of it.
MIN_LEFT_SECONDS=$((12 * 3600))

# cert_login_ok [CERT] : true if `batch` logs in with the user key and CERT (default: the
# day certificate) and the server presents our host key.
cert_login_ok() {
    local cert="${1:-$DAY_CERT}"
    [[ -r "$USER_KEY" && -r "$cert" && -r "$KNOWN_HOSTS" ]] || return 1
    ssh -F /dev/null -o UserKnownHostsFile="$KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR \
        -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
        -o CertificateFile="$cert" -i "$USER_KEY" -p "$CA_PORT" \
        "$CA_USER@$CA_HOST" true </dev/null >/dev/null 2>&1
}

# key_alone_refused : true if the user key without a certificate is refused.
key_alone_refused() {
    ! ssh -F /dev/null -o UserKnownHostsFile="$KNOWN_HOSTS" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -o LogLevel=ERROR \
        -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
        -o CertificateFile=none -i "$USER_KEY" -p "$CA_PORT" \
        "$CA_USER@$CA_HOST" true </dev/null >/dev/null 2>&1
}

# cert_seconds_left CERT : print how many seconds CERT is still valid (negative once expired).
cert_seconds_left() {
    local before
    before="$(ssh-keygen -L -f "$1" | awk '/Valid: from/ {print $5}')"
    [[ -n "$before" ]] || return 1
    echo $(($(date -d "$before" +%s) - $(date +%s)))
}

sshd_pid() {
    local pid
    [[ -r "$SSHD_PID_FILE" ]] || return 1
    pid="$(tr -dc '0-9' <"$SSHD_PID_FILE")"
    [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null || true)" == sshd ]] || return 1
    ! process_gone "$pid" || return 1
    printf '%s\n' "$pid"
}

stop_sshd() {
    local pid
    if pid="$(sshd_pid)"; then
        log "ca: stopping sshd pid $pid"
        kill -TERM "$pid" 2>/dev/null || true
        if ! WAIT_FOR_SLEEP=0.1 wait_for 50 "sshd pid $pid to exit" process_gone "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            WAIT_FOR_SLEEP=0.1 wait_for 20 "sshd pid $pid to die" process_gone "$pid"
        fi
    fi
    rm -f "$SSHD_PID_FILE"
}

# issue CERT VALIDITY : sign the user key's certificate for `batch` into CERT.
issue() {
    local cert=$1 validity=$2 tmp
    tmp="$(mktemp -d "$CA_DIR/issue.XXXXXX")"
    cp "$USER_KEY.pub" "$tmp/key.pub"
    ssh-keygen -q -s "$CA_KEY" -I "batchbridge-testbed-$(basename "$cert")" -n "$CA_USER" \
        -V "$validity" "$tmp/key.pub"
    chmod 644 "$tmp/key-cert.pub"
    mv -f "$tmp/key-cert.pub" "$cert"
    rm -rf "$tmp"
}

ensure_certificates() {
    local left
    if ! left="$(cert_seconds_left "$DAY_CERT" 2>/dev/null)" || ((left < MIN_LEFT_SECONDS)); then
        log "ca: issuing the 1-day certificate $DAY_CERT"
        issue "$DAY_CERT" +1d
    fi
    if [[ ! -s "$EXPIRED_CERT" ]]; then
        log "ca: issuing the expired certificate $EXPIRED_CERT"
        issue "$EXPIRED_CERT" 20200101:20200102
    fi
}

ensure_keys() {
    ensure_keypair "$CA_KEY" batchbridge-testbed-user-ca
    ensure_keypair "$USER_KEY" batchbridge-testbed-certificate-user
    ensure_keypair "$HOST_KEY" batchbridge-testbed-ca-login-host
    printf '[%s]:%s %s\n' "$CA_HOST" "$CA_PORT" "$(awk '{print $1, $2}' "$HOST_KEY.pub")" \
        >"$KNOWN_HOSTS.tmp"
    chmod 644 "$KNOWN_HOSTS.tmp"
    mv -f "$KNOWN_HOSTS.tmp" "$KNOWN_HOSTS"
}

write_sshd_config() {
    local extra=""
    # OpenSSH >= 9.8 penalises sources with failed logins; the tests fail on purpose.
    if "$SSHD_BIN" -t -f /dev/null -h "$HOST_KEY" -o PerSourcePenalties=no >/dev/null 2>&1; then
        extra="PerSourcePenalties no"
    fi
    cat >"$SSHD_CONFIG.tmp" <<EOF
# Generated by tests/testbed/ca.sh; rewritten on every slow-path 'up'.
# Certificates signed by the test user CA only: no authorized_keys, no password.
ListenAddress $CA_HOST
Port $CA_PORT
HostKey $HOST_KEY
PidFile $SSHD_PID_FILE
TrustedUserCAKeys $CA_KEY.pub
AuthorizedKeysFile none
AuthorizedPrincipalsFile none
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $CA_USER
StrictModes yes
MaxStartups 200:30:400
MaxSessions 200
LoginGraceTime 60
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
LogLevel VERBOSE
Subsystem sftp internal-sftp
$extra
EOF
    chmod 644 "$SSHD_CONFIG.tmp"
    mv -f "$SSHD_CONFIG.tmp" "$SSHD_CONFIG"
    "$SSHD_BIN" -t -f "$SSHD_CONFIG" || die "sshd -t rejected $SSHD_CONFIG"
}

write_facts() {
    printf '{"host":"%s","port":%d,"user":"%s","ca_key":"%s","user_key":"%s","certificate":"%s","expired_certificate":"%s","known_hosts":"%s"}\n' \
        "$CA_HOST" "$CA_PORT" "$CA_USER" "$(json_escape "$CA_KEY")" \
        "$(json_escape "$USER_KEY")" "$(json_escape "$DAY_CERT")" \
        "$(json_escape "$EXPIRED_CERT")" "$(json_escape "$KNOWN_HOSTS")" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

cmd_up() {
    if [[ -s "$FACTS" ]] && cert_login_ok; then
        ensure_certificates
        log "ca: already up on $CA_HOST:$CA_PORT"
        return 0
    fi
    [[ "$TESTBED_DIR" != *[[:space:]]* ]] || die "TESTBED_DIR must not contain whitespace: $TESTBED_DIR"
    [[ "$(id -u)" == 0 ]] || die "ca.sh up must run as root"
    id -u "$CA_USER" >/dev/null 2>&1 || die "no user $CA_USER: bring sshd.sh up first"
    local started=$SECONDS

    install -d -m 755 "$TESTBED_DIR" "$CA_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
    if [[ -s "$FACTS" ]] && cert_login_ok; then
        log "ca: already up on $CA_HOST:$CA_PORT"
        return 0
    fi

    [[ -x "$SSHD_BIN" ]] || apt_install openssh-server
    command -v ssh >/dev/null || apt_install openssh-client

    ensure_keys
    ensure_certificates
    install -d -o root -g root -m 755 "$PRIVSEP_DIR"
    write_sshd_config
    stop_sshd
    if port_open "$CA_PORT"; then
        die "something else already listens on $CA_HOST:$CA_PORT (not our sshd)"
    fi
    log "ca: starting sshd on $CA_HOST:$CA_PORT (log: $SSHD_LOG)"
    # sshd daemonizes; keep the lock fd out of it.
    "$SSHD_BIN" -f "$SSHD_CONFIG" -E "$SSHD_LOG" {lock_fd}>&- </dev/null || die "sshd failed to start"

    if ! wait_for 50 "certificate login to $CA_USER@$CA_HOST:$CA_PORT" cert_login_ok; then
        tail -n 30 "$SSHD_LOG" >&2 || true
        die "sshd does not accept the CA's certificate"
    fi
    key_alone_refused || die "sshd accepts the user key without a certificate"
    ! cert_login_ok "$EXPIRED_CERT" || die "sshd accepts the expired certificate"
    write_facts
    log "ca: up on $CA_HOST:$CA_PORT (pid $(sshd_pid || echo '?')) in $((SECONDS - started))s, facts: $FACTS"
}

cmd_down() {
    if [[ -d "$CA_DIR" ]]; then
        exec {lock_fd}>"$LOCK_FILE"
        flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
    fi
    stop_sshd
    log "ca: down"
}

cmd_status() {
    local pid
    if cert_login_ok; then
        echo "ca: up on $CA_HOST:$CA_PORT (pid $(sshd_pid || echo '?')), facts: $FACTS"
        return 0
    fi
    if pid="$(sshd_pid)"; then
        echo "ca: not answering (pid $pid is running, see $SSHD_LOG)"
    else
        echo "ca: down"
    fi
    return 1
}

component_main "$@"
