#!/usr/bin/env bash
# Test bed component: the runtime stage of the operator's image (the Dockerfile's last stage)
# as a root filesystem, so that batchbridge-operator/tests/image_runtime.rs can run the
# operator binary the way Kubernetes runs the image, with no docker daemon or registry.
#
# usage: image.sh up|down|status
#
#   up      read the Dockerfile's runtime stage; its FROM must be Debian's official image
#           (debian:SUITE or debian:SUITE-slim). Debootstrap `--variant=minbase SUITE` (what
#           the official image is made from) once into $TESTBED_DIR/image/base/SUITE, the
#           FROM layer (about 30 s, then cached); copy it to $TESTBED_DIR/image/rootfs and
#           run the stage's RUN instructions there with chroot, as root or the USER then in
#           force, with the ENV then in force, in a private mount namespace holding /proc,
#           /dev and the host's resolv.conf and hosts (all unmounted when the namespace ends).
#           The instructions are read from the Dockerfile, never copied, so the Dockerfile
#           is what is tested. The root filesystem is rebuilt when a sha256 of the stage's
#           FROM, RUN, ENV, USER and WORKDIR instructions changes. Write facts.json.
#           Idempotent; quick when current.
#   down    nothing runs, so nothing stops; the root filesystems are kept.
#   status  print whether the root filesystem matches the Dockerfile; exit 0 if so, 1 if not.
#
# What tests get ($TESTBED_DIR/image/facts.json):
#   {"rootfs":".../image/rootfs","from":"docker.io/library/debian:bookworm-slim",
#    "user":"65532:65532","uid":65532,"gid":65532,"user_name":"batchbridge",
#    "home":"/nonexistent","binary":"/usr/local/bin/batchbridge-operator",
#    "env":{"PATH":"...","TMPDIR":"/tmp"},"entrypoint":[...],"cmd":[...],"stage_sha256":"..."}
# `binary` is where the stage's COPY --from puts the binary (the test bind-mounts the one
# cargo built there); `env` is the image's environment: the base image's PATH, then the
# stage's ENV. A container also gets HOME from the user's passwd entry (`home`; empty when
# there is none). Tests take a shared lock on $TESTBED_DIR/image/.lock while they use the
# root filesystem; `up` replaces it only under the exclusive lock.
#
# Instructions the runtime stage may use: FROM, RUN (shell form), ENV, USER, WORKDIR, one
# COPY --from=STAGE of one file, EXPOSE, LABEL, ENTRYPOINT and CMD (exec form). Anything
# else stops `up` with a message rather than being skipped. Of the official image's own
# settings, those that only save space in other ways (no documentation or translations) are
# not reproduced: they change no program.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/testbed/lib.sh
. "$HERE/lib.sh"

DOCKERFILE="$(cd "$HERE/../.." && pwd)/Dockerfile"
MIRROR=http://deb.debian.org/debian
SECURITY_MIRROR=http://deb.debian.org/debian-security
# The PATH the official Debian image's configuration sets (and docker's default).
DEFAULT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Part of the stage hash: bump when the way this script builds the root filesystem changes.
BUILD_FORMAT=2

IMAGE_DIR="$TESTBED_DIR/image"
ROOTFS="$IMAGE_DIR/rootfs"
STAMP="$IMAGE_DIR/rootfs.sha256"
FACTS="$IMAGE_DIR/facts.json"
BUILD_LOG="$IMAGE_DIR/build.log"
LOCK_FILE="$IMAGE_DIR/.lock"

lock_fd=""

# What the runtime stage says, set by read_stage.
STAGE=()
STAGE_SHA=""
FROM_IMAGE=""
SUITE=""
USER_SPEC=""
WORKDIR=/
BINARY=""
ENTRYPOINT=null
CMD=null
declare -A ENV_VALUES=()
ENV_KEYS=()

# runtime_stage : the Dockerfile's last stage, one instruction a line, as docker's parser
# reads it: comment and blank lines dropped (also inside a continuation), lines ending in `\`
# joined with the next.
runtime_stage() {
    [[ -r "$DOCKERFILE" ]] || die "image: $DOCKERFILE not found"
    if grep -qiE '^#[[:space:]]*escape[[:space:]]*=' "$DOCKERFILE"; then
        die "image: the escape parser directive is not supported"
    fi
    awk '
        { sub(/\r$/, "") }
        /^[ \t]*#/ || /^[ \t]*$/ { next }
        /\\[ \t]*$/ { sub(/\\[ \t]*$/, ""); pending = pending $0; next }
        {
            line = pending $0
            pending = ""
            sub(/^[ \t]+/, "", line)
            if (toupper(line) ~ /^FROM[ \t]/) n = 0
            stage[n++] = line
        }
        END {
            if (pending != "") stage[n++] = pending
            for (i = 0; i < n; i++) print stage[i]
        }
    ' "$DOCKERFILE"
}

# set_env NAME VALUE
set_env() {
    [[ -v "ENV_VALUES[$1]" ]] || ENV_KEYS+=("$1")
    ENV_VALUES[$1]=$2
}

# expand WORD : WORD with $NAME and ${NAME} replaced from the ENV in force, as docker does
# for ENV, USER, WORKDIR and COPY.
expand() {
    local rest=$1 out="" name re='^([^$]*)[$]([{]([A-Za-z_][A-Za-z0-9_]*)[}]|([A-Za-z_][A-Za-z0-9_]*))(.*)$'
    while [[ $rest =~ $re ]]; do
        name=${BASH_REMATCH[3]:-${BASH_REMATCH[4]}}
        out+=${BASH_REMATCH[1]}${ENV_VALUES[$name]:-}
        rest=${BASH_REMATCH[5]}
    done
    [[ $rest != *'$'* ]] || die "image: unsupported substitution in '$1'"
    printf '%s' "$out$rest"
}

# parse_from ARGS : FROM must name Debian's official image; sets FROM_IMAGE and SUITE.
parse_from() {
    local re='^((docker\.io/)?library/)?debian:([a-z]+)(-slim)?(@sha256:[0-9a-f]{64})?([[:space:]]+[Aa][Ss][[:space:]]+[^[:space:]]+)?$'
    [[ $1 =~ $re ]] ||
        die "image: the runtime stage must start FROM debian:SUITE[-slim] (debootstrap builds it), not '$1'"
    FROM_IMAGE=${1%%[[:space:]]*}
    SUITE=${BASH_REMATCH[3]}
}

# parse_env ARGS : ENV NAME=VALUE... or ENV NAME VALUE; values without quotes or escapes.
parse_env() {
    local args=$1 word words re='^([A-Za-z_][A-Za-z0-9_]*)=([^"'\''\]*)$'
    if [[ $args =~ ^([A-Za-z_][A-Za-z0-9_]*)[[:space:]]+(.*)$ ]]; then
        set_env "${BASH_REMATCH[1]}" "$(expand "${BASH_REMATCH[2]}")"
        return
    fi
    read -r -a words <<<"$args"
    ((${#words[@]} > 0)) || die "image: ENV without a variable"
    for word in "${words[@]}"; do
        [[ $word =~ $re ]] ||
            die "image: unsupported ENV (quotes and escapes are not handled): ENV $args"
        set_env "${BASH_REMATCH[1]}" "$(expand "${BASH_REMATCH[2]}")"
    done
}

# parse_copy ARGS : the one COPY --from=STAGE SOURCE DEST of the binary; sets BINARY.
parse_copy() {
    local words
    read -r -a words <<<"$1"
    [[ ${#words[@]} == 3 && ${words[0]} == --from=* && ${words[2]} == /* ]] ||
        die "image: only COPY --from=STAGE SOURCE /ABSOLUTE/DEST is supported, not COPY $1"
    [[ -z $BINARY ]] || die "image: more than one COPY in the runtime stage"
    BINARY=$(expand "${words[2]}")
}

# exec_form NAME ARGS : ARGS, which must be the exec (JSON array) form.
exec_form() {
    [[ $2 =~ ^\[.*\]$ ]] || die "image: only the exec form of $1 is supported, not $1 $2"
    printf '%s' "$2"
}

# read_stage : reads the runtime stage and what it sets, and its hash.
read_stage() {
    local line
    mapfile -t STAGE < <(runtime_stage)
    ((${#STAGE[@]} > 0)) || die "image: no FROM in $DOCKERFILE"
    walk_stage check
    # What shapes the root filesystem: the base, and what every RUN runs with.
    STAGE_SHA="$(
        {
            printf 'format %s\n' "$BUILD_FORMAT"
            for line in "${STAGE[@]}"; do
                case "$(keyword_of "$line")" in
                FROM | RUN | ENV | USER | WORKDIR) printf '%s\n' "$line" ;;
                esac
            done
        } | sha256sum
    )"
    STAGE_SHA=${STAGE_SHA%% *}
}

keyword_of() {
    local keyword=${1%%[[:space:]]*}
    printf '%s' "${keyword^^}"
}

# walk_stage MODE : goes through the runtime stage's instructions in order, keeping ENV,
# USER and WORKDIR as docker does; MODE `run` also carries out each RUN and WORKDIR in
# $BUILD_ROOT.
walk_stage() {
    local mode=$1 line keyword args
    ENV_VALUES=()
    ENV_KEYS=()
    set_env PATH "$DEFAULT_PATH"
    USER_SPEC=""
    WORKDIR=/
    BINARY=""
    ENTRYPOINT=null
    CMD=null
    for line in "${STAGE[@]}"; do
        keyword=$(keyword_of "$line")
        args=""
        if [[ $line == *[[:space:]]* ]]; then
            args=${line#*[[:space:]]}
            args=${args#"${args%%[![:space:]]*}"}
        fi
        case $keyword in
        FROM) parse_from "$args" ;;
        RUN) if [[ $mode == run ]]; then run_instruction "$args"; fi ;;
        ENV) parse_env "$args" ;;
        USER) USER_SPEC=$(expand "$args") ;;
        WORKDIR)
            args=$(expand "$args")
            [[ $args == /* ]] || args="${WORKDIR%/}/$args"
            WORKDIR=$args
            if [[ $mode == run ]]; then chroot "$BUILD_ROOT" mkdir -p -- "$WORKDIR"; fi
            ;;
        COPY) parse_copy "$args" ;;
        ENTRYPOINT) ENTRYPOINT=$(exec_form ENTRYPOINT "$args") ;;
        CMD) CMD=$(exec_form CMD "$args") ;;
        EXPOSE | LABEL) ;;
        *) die "image: $keyword in the runtime stage is not supported by image.sh: $line" ;;
        esac
    done
}

# passwd_field ROOT KEY-FIELD KEY FIELD : a field of the passwd entry of ROOT whose field
# KEY-FIELD (1 name, 3 uid) is KEY.
passwd_field() {
    awk -F: -v k="$2" -v key="$3" -v f="$4" '$k == key { print $f; exit }' "$1/etc/passwd"
}

# numeric_user ROOT : USER_SPEC as UID:GID, names looked up in ROOT, the group defaulting to
# the user's primary group (as docker does); empty for no USER.
numeric_user() {
    local root=$1 user group
    [[ -n $USER_SPEC ]] || return 0
    user=${USER_SPEC%%:*}
    group=""
    [[ $USER_SPEC != *:* ]] || group=${USER_SPEC#*:}
    if [[ ! $user =~ ^[0-9]+$ ]]; then
        local name=$user
        user=$(passwd_field "$root" 1 "$name" 3)
        [[ -n $user ]] || die "image: USER $USER_SPEC: no user $name in the image"
    fi
    if [[ -z $group ]]; then
        group=$(passwd_field "$root" 3 "$user" 4)
        [[ -n $group ]] || die "image: USER $USER_SPEC: give a group, the image has no user $user"
    elif [[ ! $group =~ ^[0-9]+$ ]]; then
        local name=$group
        group=$(awk -F: -v name="$name" '$1 == name { print $3; exit }' "$root/etc/group")
        [[ -n $group ]] || die "image: USER $USER_SPEC: no group $name in the image"
    fi
    printf '%s:%s' "$user" "$group"
}

# run_instruction COMMAND : RUN COMMAND in $BUILD_ROOT, as `/bin/sh -c` with the ENV, USER
# and WORKDIR in force.
run_instruction() {
    local cmd=$1 ids home name env_args=() as_user=()
    [[ $cmd != '['* ]] || die "image: the exec form of RUN is not supported: RUN $cmd"
    [[ $cmd != --* ]] || die "image: RUN flags are not supported: RUN $cmd"
    [[ $cmd != '<<'* ]] || die "image: RUN here-documents are not supported: RUN $cmd"
    ids=$(numeric_user "$BUILD_ROOT")
    if [[ -n $ids ]]; then
        as_user=(--userspec="$ids")
        home=$(passwd_field "$BUILD_ROOT" 3 "${ids%%:*}" 6)
    else
        home=/root
    fi
    for name in "${ENV_KEYS[@]}"; do
        env_args+=("$name=${ENV_VALUES[$name]}")
    done
    log "image: RUN ${cmd:0:100}$([[ ${#cmd} -le 100 ]] || echo ...)"
    printf '\n===== %s RUN %s\n' "$(date '+%F %T')" "$cmd" >>"$BUILD_LOG"
    # shellcheck disable=SC2016 # expanded by the image's sh
    if ! env -i HOME="${home:-/}" "${env_args[@]}" chroot "${as_user[@]}" "$BUILD_ROOT" \
        /bin/sh -c 'cd "$1" && exec /bin/sh -c "$2"' sh "$WORKDIR" "$cmd" \
        </dev/null >>"$BUILD_LOG" 2>&1; then
        tail -n 30 "$BUILD_LOG" >&2
        die "image: RUN failed (log: $BUILD_LOG): RUN $cmd"
    fi
}

# no_mounts_under DIR : refuse to delete a tree that something is mounted in.
no_mounts_under() {
    ! awk -v dir="$1" '$5 == dir || index($5, dir "/") == 1 { found = 1 } END { exit !found }' \
        /proc/self/mountinfo || die "image: something is mounted under $1; not deleting it"
}

# ensure_base : the FROM layer, debootstrapped once per suite.
ensure_base() {
    local base="$IMAGE_DIR/base/$SUITE"
    BASE=$base
    [[ -e "$base.ready" ]] && return 0
    command -v debootstrap >/dev/null || apt_install debootstrap
    no_mounts_under "$base"
    rm -rf "$base"
    install -d -m 755 "$IMAGE_DIR/base"
    log "image: debootstrap --variant=minbase $SUITE into $base (the FROM layer, once)"
    # In a private mount namespace: whatever debootstrap mounts goes when it ends.
    unshare --mount --propagation private \
        debootstrap --variant=minbase "$SUITE" "$base" "$MIRROR" >"$IMAGE_DIR/debootstrap.log" 2>&1 ||
        { tail -n 20 "$IMAGE_DIR/debootstrap.log" >&2; die "image: debootstrap failed"; }
    # As the official image: no package lists or downloaded packages left behind.
    rm -rf "$base"/var/lib/apt/lists/* "$base"/var/cache/apt/archives/*.deb
    touch "$base.ready"
}

# official_image_config ROOT : what Debian's official image adds to debootstrap's minbase
# that changes what a RUN does: its package sources (with updates and security), a
# policy-rc.d that keeps packages from starting services, and apt removing the packages it
# downloaded once they are installed (docker-clean).
official_image_config() {
    local root=$1
    rm -f "$root/etc/apt/sources.list"
    cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    local clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
    cat >"$root/etc/apt/apt.conf.d/docker-clean" <<EOF
DPkg::Post-Invoke { "$clean"; };
APT::Update::Post-Invoke { "$clean"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
}

# build_rootfs : a copy of the FROM layer with the stage's RUN instructions carried out.
build_rootfs() {
    local started=$SECONDS
    ensure_base
    no_mounts_under "$ROOTFS.new"
    rm -rf "$ROOTFS.new"
    cp -a "$BASE" "$ROOTFS.new"
    official_image_config "$ROOTFS.new"
    : >"$BUILD_LOG"
    unshare --mount --propagation private bash "${BASH_SOURCE[0]}" run-stage "$ROOTFS.new" \
        "$STAGE_SHA" || die "image: the runtime stage failed (log: $BUILD_LOG)"
    no_mounts_under "$ROOTFS"
    rm -f "$STAMP"
    rm -rf "$ROOTFS"
    mv "$ROOTFS.new" "$ROOTFS"
    printf '%s\n' "$STAGE_SHA" >"$STAMP"
    log "image: runtime stage built in $((SECONDS - started))s"
}

# The internal `run-stage ROOT SHA`, in build_rootfs's private mount namespace: mount what a
# build container has and carry out the stage in ROOT.
cmd_run_stage() {
    BUILD_ROOT=$1
    read_stage
    [[ $STAGE_SHA == "$2" ]] || die "image: the Dockerfile changed during the build; run up again"
    mount -t proc proc "$BUILD_ROOT/proc"
    mount --rbind /dev "$BUILD_ROOT/dev"
    local file
    for file in resolv.conf hosts; do
        if [[ -f "$BUILD_ROOT/etc/$file" && ! -L "$BUILD_ROOT/etc/$file" ]]; then
            mount --bind "/etc/$file" "$BUILD_ROOT/etc/$file"
        fi
    done
    walk_stage run
}

# facts_json : the facts of the current stage and root filesystem.
facts_json() {
    local ids uid="" gid="" name="" home="" env="" key
    ids=$(numeric_user "$ROOTFS")
    if [[ -n $ids ]]; then
        uid=${ids%%:*}
        gid=${ids#*:}
        name=$(passwd_field "$ROOTFS" 3 "$uid" 1)
        home=$(passwd_field "$ROOTFS" 3 "$uid" 6)
    fi
    for key in "${ENV_KEYS[@]}"; do
        env+="${env:+,}\"$(json_escape "$key")\":\"$(json_escape "${ENV_VALUES[$key]}")\""
    done
    printf '{"rootfs":"%s","from":"%s","user":"%s","uid":%s,"gid":%s,"user_name":"%s","home":"%s","binary":"%s","env":{%s},"entrypoint":%s,"cmd":%s,"stage_sha256":"%s"}\n' \
        "$(json_escape "$ROOTFS")" "$(json_escape "$FROM_IMAGE")" "$(json_escape "$USER_SPEC")" \
        "${uid:-null}" "${gid:-null}" "$(json_escape "$name")" "$(json_escape "$home")" \
        "$(json_escape "$BINARY")" "$env" "$ENTRYPOINT" "$CMD" "$STAGE_SHA"
}

rootfs_current() {
    [[ -d $ROOTFS && "$(cat "$STAMP" 2>/dev/null)" == "$STAGE_SHA" ]]
}

image_ok() {
    rootfs_current && [[ "$(facts_json)" == "$(cat "$FACTS" 2>/dev/null)" ]]
}

write_facts() {
    facts_json >"$FACTS.tmp"
    chmod 644 "$FACTS.tmp"
    mv -f "$FACTS.tmp" "$FACTS"
}

cmd_up() {
    read_stage
    if image_ok; then
        log "image: $FROM_IMAGE runtime stage ready at $ROOTFS"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "image.sh up must run as root"
    install -d -m 755 "$IMAGE_DIR"
    exec {lock_fd}>"$LOCK_FILE"
    # A first build takes a minute; wait for it rather than build twice. Tests hold the lock
    # shared while they use the root filesystem.
    flock -w 900 "$lock_fd" || die "could not lock $LOCK_FILE"
    rootfs_current || build_rootfs
    [[ -n $BINARY ]] || die "image: the runtime stage copies no binary in"
    write_facts
    log "image: $FROM_IMAGE runtime stage ready at $ROOTFS, facts: $FACTS"
}

cmd_down() {
    log "image: nothing to stop (root filesystems kept in $IMAGE_DIR)"
}

cmd_status() {
    read_stage
    if image_ok; then
        echo "image: $FROM_IMAGE runtime stage at $ROOTFS matches $DOCKERFILE, facts: $FACTS"
        return 0
    fi
    echo "image: the root filesystem is missing or older than $DOCKERFILE's runtime stage (run image.sh up)"
    return 1
}

case "${1:-}" in
run-stage) cmd_run_stage "$2" "$3" ;;
*) component_main "$@" ;;
esac
