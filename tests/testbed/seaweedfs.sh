#!/usr/bin/env bash
# Test bed component: a real S3-compatible object store on loopback, SeaweedFS's single
# `weed` binary (Apache-2.0) running `weed server -s3` (master, volume server, filer and S3
# gateway in one process), for the operator's object-storage inputs and outputs.
#
# usage: seaweedfs.sh up|down|status
#
#   up      build `weed` at the pinned module version from the Go module proxy into
#           $TESTBED_DIR/seaweedfs/bin unless a weed stamped with that version is already
#           there (about 9 minutes once on 2 busy cores; the 157 MB binary, stamped with its
#           version in bin/weed.version, is what is kept, so a second run builds nothing;
#           the 5.6 GB of Go caches are removed after the build); make the test
#           credentials once (kept); start weed unless already running and answering;
#           check a signed request (ListBuckets) with the credentials and that an unsigned
#           one is refused; write facts.json. Idempotent; quick when already up.
#   down    stop weed (by its pid file) and delete its data, so the next `up` starts with an
#           empty store. Binary, caches and credentials are kept.
#   status  print whether weed is running and answering; exit 0 if up, 1 if not.
#   build   only build weed if it is not built at the pinned version (no package installs,
#           no daemon started; a weed of another version is stopped): up.sh runs this in the
#           background from its start, so the long first build overlaps the other
#           components' installs, and this component's `up` then finds it built.
#
# What tests get ($TESTBED_DIR/seaweedfs/facts.json, mode 644: the credentials only open
# this loopback test store):
#   {"endpoint":"http://127.0.0.1:18333","region":"us-east-1","bucket":"batchbridge-tests",
#    "access_key":"...","secret_key":"...","weed":".../seaweedfs/bin/weed",
#    "version":"v0.0.0-20261109003541-7506e5f91cd6"}
# Path-style addressing (http://127.0.0.1:18333/BUCKET/KEY). Tests share the one bucket
# `up` makes, each under a key prefix of its own, and may leave their objects: `down`
# wipes the store.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

# Pinned version: github.com/seaweedfs/seaweedfs publishes no semver tags on the Go module
# proxy, so this is the pseudo-version of one commit (the newest the proxy served when pinned).
SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6

HOST=127.0.0.1
# weed's gRPC ports are each HTTP port + 10000 (29333, 28080, 28888, 28333): all free here.
MASTER_PORT=19333
VOLUME_PORT=18080
FILER_PORT=18888
S3_PORT=18333
ENDPOINT="http://$HOST:$S3_PORT"
REGION=us-east-1
ACCESS_KEY_ID=batchbridge-test
# The one bucket tests use, each under a key prefix of its own: every bucket is a SeaweedFS
# collection with volumes of its own, so a bucket per test would soon use up the volume
# server's slots (-volume.max).
BUCKET=batchbridge-tests

COMPONENT_NAME=seaweedfs
SWFS_DIR="$TESTBED_DIR/seaweedfs"
DAEMON_DIR="$SWFS_DIR"
BIN_DIR="$SWFS_DIR/bin"
BUILD_DIR="$SWFS_DIR/build"
BUILD_LOG="$BUILD_DIR/build.log"
DATA_DIR="$SWFS_DIR/data"
WEED="$BIN_DIR/weed"
STAMP="$BIN_DIR/weed.version"
SECRET_FILE="$SWFS_DIR/secret_key"
S3_CONFIG="$SWFS_DIR/s3.json"
FACTS="$SWFS_DIR/facts.json"
LOCK_FILE="$SWFS_DIR/.lock"

lock_fd=""

# daemon_is NAME PID : the pid file names a weed process.
daemon_is() {
    [[ "$(cat "/proc/$2/comm" 2>/dev/null || true)" == weed ]]
}

# ---------------------------------------------------------------------------
# Build

built_version() {
    [[ -x "$WEED" && -s "$STAMP" ]] || return 0
    cat "$STAMP"
}

# build_weed : seaweedfs' go.mod has replace directives, which `go install pkg@version`
# refuses, so weed is built as a tool of a throwaway module that requires the pinned version
# and repeats those replaces (read from its go.mod, not typed in).
build_weed() {
    local dir="$BUILD_DIR/module" started=$SECONDS info gomod goversion edits=() line
    GO="$(find_go "weed")"
    log "seaweedfs: building weed $SEAWEEDFS_VERSION with $("$GO" version) (log: $BUILD_LOG)"
    install -d "$BIN_DIR" "$BUILD_DIR" "$dir"
    rm -f "$dir/go.mod" "$dir/go.sum"
    go_logged "$dir" mod init batchbridge.invalid/testbed-seaweedfs-build
    info="$(go_in "$BUILD_DIR" list -m -f '{{.GoMod}} {{.GoVersion}}' \
        "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION" 2>>"$BUILD_LOG")" ||
        die "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION not found through the Go module proxy (log: $BUILD_LOG)"
    read -r gomod goversion <<<"$info"
    edits=(-go="$goversion" -require="$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION"
        -tool="$SEAWEEDFS_MODULE/weed")
    # `replace A => B vX` lines (single-line form; a path replace such as `=> ../x` cannot be
    # repeated outside seaweedfs' tree, and the pinned go.mod has none outside comments).
    while read -r line; do
        edits+=(-replace="$line")
    done < <(awk '{ sub(/^[ \t]*replace[ \t]+/, "") }
                  /^\/\// { next }
                  $2 == "=>" && NF == 4 { print $1 "=" $3 "@" $4 }
                  $3 == "=>" && NF == 5 { print $1 "@" $2 "=" $4 "@" $5 }' "$gomod")
    go_logged "$dir" mod edit "${edits[@]}"
    go_logged "$dir" mod tidy
    rm -rf "$dir/out"
    go_logged "$dir" build -ldflags "-s -w" -o "$dir/out/weed" "$SEAWEEDFS_MODULE/weed"
    mv -f "$dir/out/weed" "$WEED"
    printf '%s\n' "$SEAWEEDFS_VERSION" >"$STAMP"
    # The stamped binary is the cache: the module and build caches (5.6 GB for weed's
    # dependency graph) only serve a version bump, which is rare; the disk is not.
    rm -rf "$BUILD_DIR/gocache" "$BUILD_DIR/gomodcache" "$dir/out"
    log "seaweedfs: build took $((SECONDS - started))s"
}

# ---------------------------------------------------------------------------
# Credentials and configuration

# write_s3_config : one identity, the test key, allowed everything on every bucket; with an
# identity configured the gateway refuses anonymous requests.
write_s3_config() {
    local secret
    secret="$(cat "$SECRET_FILE")"
    (umask 077 && cat >"$S3_CONFIG.tmp" <<EOF
{
  "identities": [
    {
      "name": "batchbridge-test",
      "credentials": [{"accessKey": "$ACCESS_KEY_ID", "secretKey": "$secret"}],
      "actions": ["Admin", "Read", "Write", "List", "Tagging"]
    }
  ]
}
EOF
    )
    mv -f "$S3_CONFIG.tmp" "$S3_CONFIG"
}

write_facts() {
    printf '{"endpoint":"%s","region":"%s","bucket":"%s","access_key":"%s","secret_key":"%s","weed":"%s","version":"%s"}\n' \
        "$ENDPOINT" "$REGION" "$BUCKET" "$ACCESS_KEY_ID" "$(json_escape "$(cat "$SECRET_FILE")")" \
        "$(json_escape "$WEED")" "$SEAWEEDFS_VERSION" >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

# ---------------------------------------------------------------------------
# Checks (curl's --aws-sigv4 signs with the test key: the gateway checks the signature)

# s3_status PATH [CURL_ARG...] : the HTTP status of a request for $ENDPOINT/PATH.
s3_status() {
    local path="$1"
    shift
    curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$@" "$ENDPOINT/$path" 2>/dev/null || true
}

# signed_s3_status PATH [CURL_ARG...] : the same, signed with the test key.
signed_s3_status() {
    s3_status "$@" --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY_ID:$(cat "$SECRET_FILE")"
}

signed_list_ok() {
    [[ "$(signed_s3_status "")" == 200 ]]
}

# master_leads : the master has won its (one-member) raft election. A restarted master
# with recovered raft state waits out an election timeout first (16 s measured), while the
# S3 gateway already answers listings; a bucket PUT made before then times out.
master_leads() {
    curl -s --max-time 2 "http://$HOST:$MASTER_PORT/cluster/status" 2>/dev/null |
        grep -q '"IsLeader":true'
}

# bucket_made : the tests' bucket exists (200 when made, 409 when this key already owns it).
bucket_made() {
    local status
    status="$(signed_s3_status "$BUCKET" -X PUT)"
    [[ "$status" == 200 || "$status" == 409 ]]
}

ensure_bucket() {
    wait_daemon weed 120 "the master to lead" master_leads
    wait_daemon weed 60 "bucket $BUCKET to be made" bucket_made
}

anonymous_refused() {
    [[ "$(s3_status "")" == 403 ]]
}

# ---------------------------------------------------------------------------

start_weed() {
    install -d -m 700 "$DATA_DIR"
    # One process: master, one volume server (small volumes: the tests' objects are small
    # and the disk is shared), filer and S3 gateway; every port on loopback only.
    start_daemon weed "$WEED" server -ip="$HOST" -ip.bind="$HOST" -dir="$DATA_DIR" \
        -master.port="$MASTER_PORT" -master.volumeSizeLimitMB=64 \
        -volume.port="$VOLUME_PORT" -volume.max=32 \
        -filer -filer.port="$FILER_PORT" \
        -s3 -s3.port="$S3_PORT" -s3.config="$S3_CONFIG"
    wait_daemon weed 120 "the S3 gateway on $ENDPOINT to accept signed requests" signed_list_ok
}

# lock_and_build : take the component's lock, kept until the script exits, and build weed
# unless the pinned version is built.
lock_and_build() {
    install -d -m 755 "$SWFS_DIR"
    lock_component "$LOCK_FILE" "$FIRST_BUILD_WAIT"
    if [[ "$(built_version)" != "$SEAWEEDFS_VERSION" ]]; then
        stop_daemon weed 10
        build_weed
    fi
}

cmd_up() {
    local started=$SECONDS
    command -v flock >/dev/null || apt_install util-linux
    command -v curl >/dev/null || apt_install curl
    # The go tool needs the CA bundle to reach the module proxy.
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] || apt_install ca-certificates
    lock_and_build

    ensure_secret_file "$SECRET_FILE"
    local config_before=""
    [[ -s "$S3_CONFIG" ]] && config_before="$(cat "$S3_CONFIG")"
    write_s3_config
    if daemon_pid weed >/dev/null && [[ "$config_before" != "$(cat "$S3_CONFIG")" ]]; then
        stop_daemon weed 10
    fi
    if daemon_pid weed >/dev/null && signed_list_ok; then
        log "seaweedfs: weed already running"
    else
        stop_daemon weed 10
        start_weed
    fi
    anonymous_refused || die "the S3 gateway on $ENDPOINT answers unsigned requests"
    ensure_bucket
    write_facts
    log "seaweedfs: S3 on $ENDPOINT ready in $((SECONDS - started))s, facts: $FACTS"
}

cmd_build() {
    if [[ ! -s /etc/ssl/certs/ca-certificates.crt ]]; then
        log "seaweedfs: no CA bundle yet; \`up\` installs it and builds weed"
        return 0
    fi
    lock_and_build
}

cmd_down() {
    install -d -m 755 "$SWFS_DIR"
    lock_component "$LOCK_FILE"
    stop_daemon weed 10
    rm -rf "$DATA_DIR" "$FACTS"
    log "seaweedfs: stopped (binary, caches and credentials kept in $SWFS_DIR)"
}

cmd_status() {
    if daemon_pid weed >/dev/null && [[ -s "$SECRET_FILE" ]] && signed_list_ok; then
        echo "seaweedfs: weed $SEAWEEDFS_VERSION running, S3 on $ENDPOINT, facts: $FACTS"
        return 0
    fi
    echo "seaweedfs: not running (want weed $SEAWEEDFS_VERSION at $WEED, S3 on $ENDPOINT)"
    return 1
}

if [[ "${1:-}" == build ]]; then
    cmd_build
else
    component_main "$@"
fi
