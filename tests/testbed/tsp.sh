#!/usr/bin/env bash
# Test bed component: Debian's task-spooler (`tsp`) on this machine, used as the user `batch`
# through the test bed sshd (sshd.sh) by the example backend examples/tsp-backend.
#
# usage: tsp.sh up|down|status
#
#   up      install the `task-spooler` package if needed (Debian names its binary tsp, as
#           moreutils has a ts), run a job with it as `batch` through ssh on a server of its
#           own, end that server, and write $TESTBED_DIR/tsp/facts.json. Idempotent.
#   down    nothing to stop: tsp has no system daemon.
#   status  print whether it is up; exit 0 if up, 1 if not.
#
# A tsp server is per user and per socket, started by the first tsp call that finds none:
# the backend gives each work directory its own (TS_SOCKET=WORK/tsp.socket) and starts it
# on demand, so nothing here keeps one running. Requires the sshd component for `batch`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

TSP_DIR="$TESTBED_DIR/tsp"
FACTS="$TSP_DIR/facts.json"
SSH_FACTS="$TESTBED_DIR/ssh/facts.json"

# ssh_fact KEY : a string or number from the sshd component's facts.json.
ssh_fact() {
    sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$SSH_FACTS"
}

# as_batch COMMAND : COMMAND run by `batch` through the test bed sshd.
as_batch() {
    ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o LogLevel=ERROR \
        -o UserKnownHostsFile="$(ssh_fact known_hosts)" -o GlobalKnownHostsFile=/dev/null \
        -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -i "$(ssh_fact private_key)" \
        -p "$(ssh_fact port)" "$(ssh_fact user)@$(ssh_fact host)" "$1" </dev/null
}

# tsp_version : e.g. `1.0.1`.
tsp_version() {
    tsp -V 2>&1 | sed -n 's/^Task Spooler v\([^ ]*\).*/\1/p'
}

up_ok() {
    [[ -s "$FACTS" ]] && command -v tsp >/dev/null
}

# prove_job_via_ssh : as `batch`, queue a job on a throwaway server, wait for it, end the server.
prove_job_via_ssh() {
    [[ -s "$SSH_FACTS" ]] || die "$SSH_FACTS missing: run tests/testbed/sshd.sh up first"
    # shellcheck disable=SC2016 # runs in the remote shell
    local remote='export TS_SOCKET="$(mktemp -u /tmp/tsp-testbed.XXXXXX)"
tsp -n sh -c "exit 7"; tsp -w 0; rc=$?
tsp -K
[ "$rc" = 7 ] && echo "a job ran, and tsp -w gave its exit code"'
    local out
    out="$(as_batch "$remote" 2>&1)" || die "tsp runs no job for batch through ssh: $out"
    log "tsp: as batch via ssh: $out"
}

cmd_up() {
    if up_ok; then
        log "tsp: already up (task-spooler $(tsp_version))"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "tsp.sh up must run as root"
    command -v tsp >/dev/null || apt_install task-spooler
    install -d -m 755 "$TSP_DIR"
    prove_job_via_ssh
    printf '{"version":"%s","binary":"%s"}\n' "$(json_escape "$(tsp_version)")" \
        "$(json_escape "$(command -v tsp)")" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
    log "tsp: up (task-spooler $(tsp_version)), facts: $FACTS"
}

cmd_down() {
    log "tsp: down (no daemon; servers end with their users' work directories)"
}

cmd_status() {
    if up_ok; then
        echo "tsp: up (task-spooler $(tsp_version)), facts: $FACTS"
        return 0
    fi
    echo "tsp: down"
    return 1
}

component_main "$@"
