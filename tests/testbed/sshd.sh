#!/usr/bin/env bash
# Test bed component: a private OpenSSH server on 127.0.0.1:2222.
#
# usage: sshd.sh up|down|status
#
#   up      install openssh-server if needed, create the `batch` user, keys,
#           known_hosts files and an own sshd_config under $TESTBED_DIR/ssh,
#           start sshd, check key and password login, write facts.json.
#           Idempotent; returns quickly when everything is already up.
#   down    stop that sshd (by its pid file); generated files are kept.
#   status  print whether it is up; exit 0 if up, 1 if not.
#
# Does not touch /etc/ssh/sshd_config or the system's ssh service.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

SSH_HOST=127.0.0.1
SSH_PORT=2222
SSH_USER="batch"
SSH_USER_HOME=/home/batch
SSHD_BIN=/usr/sbin/sshd

SSH_DIR="$TESTBED_DIR/ssh"
CLIENT_KEY="$SSH_DIR/id_ed25519"
HOST_KEY="$SSH_DIR/ssh_host_ed25519_key"
KNOWN_HOSTS="$SSH_DIR/known_hosts"
WRONG_KNOWN_HOSTS="$SSH_DIR/wrong_known_hosts"
PASSWORD_FILE="$SSH_DIR/password"
ASKPASS="$SSH_DIR/askpass.sh"
SSHD_CONFIG="$SSH_DIR/sshd_config"
SSHD_PID_FILE="$SSH_DIR/sshd.pid"
SSHD_LOG="$SSH_DIR/sshd.log"
FACTS="$SSH_DIR/facts.json"
LOCK_FILE="$SSH_DIR/.lock"
PRIVSEP_DIR=/run/sshd

# Options shared by every client check: ignore all user/system ssh config.
ssh_common_opts() {
    printf '%s\n' \
        -F /dev/null \
        -o UserKnownHostsFile="$KNOWN_HOSTS" \
        -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes \
        -o ConnectTimeout=5 \
        -o LogLevel=ERROR \
        -p "$SSH_PORT"
}

# key_auth_ok : true if `batch` can log in with the client key and the
# server presents our host key.
key_auth_ok() {
    [[ -r "$CLIENT_KEY" && -r "$KNOWN_HOSTS" ]] || return 1
    local opts
    mapfile -t opts < <(ssh_common_opts)
    ssh "${opts[@]}" -o BatchMode=yes -o IdentitiesOnly=yes -i "$CLIENT_KEY" \
        "$SSH_USER@$SSH_HOST" true </dev/null >/dev/null 2>&1
}

# password_auth_ok : true if `batch` can log in with the password (askpass).
password_auth_ok() {
    local opts
    mapfile -t opts < <(ssh_common_opts)
    SSH_ASKPASS="$ASKPASS" SSH_ASKPASS_REQUIRE=force DISPLAY=none \
        ssh "${opts[@]}" -o PubkeyAuthentication=no \
        -o PreferredAuthentications=password -o NumberOfPasswordPrompts=1 \
        "$SSH_USER@$SSH_HOST" true </dev/null
}

# sshd_pid : print the pid from the pid file if that process is a live sshd.
sshd_pid() {
    local pid comm
    [[ -r "$SSHD_PID_FILE" ]] || return 1
    pid="$(tr -dc '0-9' <"$SSHD_PID_FILE")"
    [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [[ "$comm" == sshd ]] || return 1
    ! process_gone "$pid" || return 1
    printf '%s\n' "$pid"
}

# port_answers : true if something speaking SSH listens on the port.
port_answers() {
    local banner
    # shellcheck disable=SC2016 # expanded by the inner bash
    banner="$(timeout 3 bash -c \
        'exec 3<>"/dev/tcp/$0/$1" && head -c 4 <&3' "$SSH_HOST" "$SSH_PORT" \
        2>/dev/null || true)"
    [[ "$banner" == SSH- ]]
}


stop_sshd() {
    local pid
    if pid="$(sshd_pid)"; then
        log "sshd: stopping pid $pid"
        kill -TERM "$pid" 2>/dev/null || true
        if ! WAIT_FOR_SLEEP=0.1 wait_for 50 "sshd pid $pid to exit" process_gone "$pid"; then
            kill -KILL "$pid" 2>/dev/null || true
            WAIT_FOR_SLEEP=0.1 wait_for 20 "sshd pid $pid to die" process_gone "$pid"
        fi
    fi
    rm -f "$SSHD_PID_FILE"
}

ensure_user() {
    if ! id -u "$SSH_USER" >/dev/null 2>&1; then
        log "creating user $SSH_USER"
        useradd --create-home --home-dir "$SSH_USER_HOME" --shell /bin/bash \
            --user-group "$SSH_USER"
    fi
    local shell
    shell="$(getent passwd "$SSH_USER" | cut -d: -f7)"
    [[ "$shell" == /bin/bash ]] || usermod --shell /bin/bash "$SSH_USER"

    ensure_secret_file "$PASSWORD_FILE"
    printf '%s:%s\n' "$SSH_USER" "$(cat "$PASSWORD_FILE")" | chpasswd
    # chpasswd replaces any lock marker; make sure, since sshd (UsePAM no)
    # refuses locked accounts even for public key logins.
    if [[ "$(passwd --status "$SSH_USER" | awk '{print $2}')" == L ]]; then
        usermod --unlock "$SSH_USER"
    fi

    # StrictModes: home not group/world writable, ~/.ssh 700, keys 600.
    install -d -o "$SSH_USER" -g "$SSH_USER" "$SSH_USER_HOME"
    chmod go-w "$SSH_USER_HOME"
    install -d -o "$SSH_USER" -g "$SSH_USER" -m 700 "$SSH_USER_HOME/.ssh"
    install -o "$SSH_USER" -g "$SSH_USER" -m 600 "$CLIENT_KEY.pub" \
        "$SSH_USER_HOME/.ssh/authorized_keys"
}


ensure_keys() {
    ensure_keypair "$CLIENT_KEY" batchbridge-testbed-client
    ensure_keypair "$HOST_KEY" batchbridge-testbed-host

    local pub
    pub="$(awk '{print $1, $2}' "$HOST_KEY.pub")"
    printf '[%s]:%s %s\n' "$SSH_HOST" "$SSH_PORT" "$pub" >"$KNOWN_HOSTS.tmp"
    chmod 644 "$KNOWN_HOSTS.tmp"
    mv -f "$KNOWN_HOSTS.tmp" "$KNOWN_HOSTS"

    if [[ ! -s "$WRONG_KNOWN_HOSTS" ]]; then
        log "generating wrong known_hosts $WRONG_KNOWN_HOSTS"
        local tmp
        tmp="$(mktemp -d)"
        ssh-keygen -q -t ed25519 -N '' -C "batchbridge-testbed-wrong" -f "$tmp/key"
        pub="$(awk '{print $1, $2}' "$tmp/key.pub")"
        rm -rf "$tmp"
        printf '[%s]:%s %s\n' "$SSH_HOST" "$SSH_PORT" "$pub" >"$WRONG_KNOWN_HOSTS"
    fi
    chmod 644 "$WRONG_KNOWN_HOSTS"
}

write_askpass() {
    # Reads the password file next to itself, so no path is baked in.
    cat >"$ASKPASS.tmp" <<'EOF'
#!/bin/sh
# SSH_ASKPASS helper for the batchbridge test bed: prints the `batch` password.
exec cat "$(dirname "$0")/password"
EOF
    chmod 700 "$ASKPASS.tmp"
    mv -f "$ASKPASS.tmp" "$ASKPASS"
}

write_sshd_config() {
    local extra=""
    # OpenSSH >= 9.8 penalises sources with failed logins; the tests make
    # failing logins from 127.0.0.1 on purpose, so switch that off if known.
    if "$SSHD_BIN" -t -f /dev/null -h "$HOST_KEY" -o PerSourcePenalties=no \
        >/dev/null 2>&1; then
        extra="PerSourcePenalties no"
    fi
    cat >"$SSHD_CONFIG.tmp" <<EOF
# Generated by tests/testbed/sshd.sh; rewritten on every slow-path 'up'.
ListenAddress $SSH_HOST
Port $SSH_PORT
HostKey $HOST_KEY
PidFile $SSHD_PID_FILE
UsePAM no
PasswordAuthentication yes
PermitEmptyPasswords no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PermitRootLogin no
AllowUsers $SSH_USER
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
    printf '{"host":"%s","port":%d,"user":"%s","private_key":"%s","password_file":"%s","known_hosts":"%s","wrong_known_hosts":"%s"}\n' \
        "$SSH_HOST" "$SSH_PORT" "$SSH_USER" \
        "$(json_escape "$CLIENT_KEY")" "$(json_escape "$PASSWORD_FILE")" \
        "$(json_escape "$KNOWN_HOSTS")" "$(json_escape "$WRONG_KNOWN_HOSTS")" \
        >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

start_sshd() {
    install -d -o root -g root -m 755 "$PRIVSEP_DIR"
    log "sshd: starting on $SSH_HOST:$SSH_PORT (log: $SSHD_LOG)"
    # sshd daemonizes (stdio -> /dev/null); keep the lock fd out of it.
    if ! "$SSHD_BIN" -f "$SSHD_CONFIG" -E "$SSHD_LOG" {lock_fd}>&- </dev/null; then
        tail -n 20 "$SSHD_LOG" >&2 2>/dev/null || true
        die "sshd failed to start"
    fi
}

cmd_up() {
    # Fast path: our sshd answers with our host key and accepts our key.
    if [[ -s "$FACTS" ]] && key_auth_ok; then
        log "sshd: already up on $SSH_HOST:$SSH_PORT"
        return 0
    fi

    [[ "$TESTBED_DIR" != *[[:space:]]* ]] || die "TESTBED_DIR must not contain whitespace: $TESTBED_DIR"
    [[ "$(id -u)" == 0 ]] || die "sshd.sh up must run as root"

    install -d -m 755 "$TESTBED_DIR" "$SSH_DIR"
    chmod 755 "$TESTBED_DIR" "$SSH_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
    # Someone else may have brought it up while we waited for the lock.
    if [[ -s "$FACTS" ]] && key_auth_ok; then
        log "sshd: already up on $SSH_HOST:$SSH_PORT"
        return 0
    fi

    [[ -x "$SSHD_BIN" ]] || apt_install openssh-server
    command -v ssh >/dev/null || apt_install openssh-client
    command -v flock >/dev/null || apt_install util-linux

    ensure_keys
    ensure_user
    write_askpass
    install -d -o root -g root -m 755 "$PRIVSEP_DIR"
    write_sshd_config

    # (Re)start: a running sshd of ours may have an old config or keys.
    stop_sshd
    if port_answers; then
        die "something else already listens on $SSH_HOST:$SSH_PORT (not our sshd, no valid $SSHD_PID_FILE)"
    fi
    start_sshd

    if ! wait_for 50 "key login to $SSH_USER@$SSH_HOST:$SSH_PORT" key_auth_ok; then
        tail -n 30 "$SSHD_LOG" >&2 || true
        die "sshd does not accept key login"
    fi
    if ! password_auth_ok; then
        tail -n 30 "$SSHD_LOG" >&2 || true
        die "sshd does not accept password login"
    fi
    write_facts
    log "sshd: up on $SSH_HOST:$SSH_PORT (pid $(sshd_pid || echo '?')), facts: $FACTS"
}

cmd_down() {
    if [[ -d "$SSH_DIR" ]]; then
        exec {lock_fd}>"$LOCK_FILE"
        flock -w 600 "$lock_fd" || die "could not lock $LOCK_FILE"
    fi
    stop_sshd
    log "sshd: down"
}

cmd_status() {
    local pid
    if key_auth_ok; then
        pid="$(sshd_pid || echo '?')"
        echo "sshd: up on $SSH_HOST:$SSH_PORT (pid $pid), facts: $FACTS"
        return 0
    fi
    if pid="$(sshd_pid)"; then
        echo "sshd: not answering (pid $pid is running, see $SSHD_LOG)"
    else
        echo "sshd: down"
    fi
    return 1
}

component_main "$@"
