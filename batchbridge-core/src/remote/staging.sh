# Stages files in and out of a job's working directory ROOT:
#   `sh -c "$STAGING" sh probe ROOT DEST SIZE...`  creates ROOT; prints `root REAL`, `trailer`
#       when `put` may take the digest after the data (this `head -c` reads no more than
#       asked), then per DEST `have SHA` (a regular file of SIZE bytes is there), `absent` or
#       `refused WHY`
#   `sh -c "$STAGING" sh put ROOT DEST SIZE [SHA]`  stdin to DEST: written to a hidden temporary
#       name beside it, its size and SHA-256 checked, then renamed into place. Without SHA,
#       stdin is SIZE bytes and then a line with their SHA-256 (the sender hashes as it
#       sends, so it reads the file once)
#   `sh -c "$STAGING" sh unpack ROOT SIZES SUMS DEST...`  stdin is a tar of the files
#       DEST (SIZES and SUMS: their sizes and SHA-256s, one a line, in order): only those
#       members are unpacked, into a hidden temporary directory; unless every one is a
#       regular file of its size and digest (and nothing else arrived) none is placed, else
#       each is renamed into place
#   `sh -c "$STAGING" sh list ROOT PATTERN...`  per file PATTERN N (a path or glob, a
#       directory taken whole) matches: `file N SIZE PATH`; `missing N` when it matches
#       nothing, `refused N WHY` for a file that may not leave
#   `sh -c "$STAGING" sh fetch ROOT PATH`  PATH on stdout, then `size SIZE sha256 SHA` on stderr
#   `sh -c "$STAGING" sh pack ROOT PATH...`  a tar of the regular files PATH (symlinks
#       inside followed) on stdout, then on stderr `sizes` and `sums` lines: each file's
#       size and SHA-256, in order, space-separated
#   `sh -c "$STAGING" sh remove ROOT PATH...`  removes the staged files PATH (cleanup)
# Every path is resolved with realpath (readlink -m where it has no -m) and must stay inside
# ROOT: a `..`, an absolute path or a symlink pointing outside is refused here as well as by
# the caller. Exit 3 is a refusal, 4 a file that arrived damaged, 5 no SHA-256 tool.
set -u
verb=$1 root=$2
shift 2
canon() { realpath -m -- "$1" 2>/dev/null || readlink -m -- "$1"; }
# Whether path $1 resolves inside the resolved root $real.
inside() {
    c=$(canon "$1") || return 1
    case $c in "$real" | "$real"/*) return 0 ;; *) return 1 ;; esac
}
# The SHA-256 of standard input, with whichever tool the cluster has, OpenSSL first (it uses
# the CPU's SHA instructions: some 4 times coreutils' speed on a gigabyte); `digest_tool`
# is empty when it has none. `digests FILE...` prints the SHA-256 of each FILE, one a line.
# `digests` takes paths that do not start with `-` (`all_inside` refuses those).
if command -v openssl >/dev/null 2>&1; then
    digest_tool=openssl
    digest() { set -- "$(openssl dgst -sha256)" && printf '%s\n' "${1##* }"; }
    digests() { openssl dgst -sha256 "$@" | sed 's/.* //'; }
elif command -v sha256sum >/dev/null 2>&1; then
    digest_tool=sha256sum
    digest() { set -- "$(sha256sum)" && printf '%s\n' "${1%% *}"; }
    digests() { sha256sum "$@" | sed 's/ .*//'; }
elif command -v shasum >/dev/null 2>&1; then
    digest_tool=shasum
    digest() { set -- "$(shasum -a 256)" && printf '%s\n' "${1%% *}"; }
    digests() { shasum -a 256 "$@" | sed 's/ .*//'; }
else
    digest_tool=
fi
# `write_and_hash FILE LIMIT`: stdin to FILE, its first LIMIT bytes (all of it for -1, and
# never a byte beyond: a trailer may follow), then their SHA-256 on stdout. One python3
# process where the cluster has one: `head | tee | openssl` cost 2 CPU seconds a GiB where
# the hash alone costs 0.7, moving 8 KiB a system call through two more pipes. Python exits
# 9 before it reads anything when it cannot hash, and a `python3` that finds no Python (a
# version manager's shim with none selected) 126 or 127: then the pipeline does the work.
write_and_hash_py='
import os, sys
try:
    from hashlib import sha256
except ImportError:
    sys.exit(9)
path, left = sys.argv[1], int(sys.argv[2])
digest = sha256()
out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
source = open(0, "rb", buffering=0, closefd=False)
if sys.platform.startswith("linux"):
    try:
        import fcntl
        fcntl.fcntl(0, 1031, 1 << 20)  # F_SETPIPE_SZ: sshd hands over 1 MiB, not 64 KiB, a read
    except OSError:
        pass
# One buffer, read into: a bytes object a read cost an mmap, an mremap and a munmap.
buf = memoryview(bytearray(1 << 20))
while left:
    n = source.readinto(buf[: min(left, len(buf))] if left > 0 else buf)
    if not n:
        break
    digest.update(buf[:n])
    view = buf[:n]
    while view:
        view = view[os.write(out, view) :]
    if left > 0:
        left -= n
os.close(out)
print(digest.hexdigest())
'
write_and_hash() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c "$write_and_hash_py" "$@"
        set -- "$@" $?
        case $3 in 9 | 126 | 127) ;; *) return "$3" ;; esac
    fi
    if [ "$2" -lt 0 ]; then
        tee -- "$1" | digest
    else
        head -c "$2" | tee -- "$1" | digest
    fi
}
need_digest() {
    [ -n "$digest_tool" ] && return 0
    echo "the cluster has no sha256sum, shasum or openssl to check a file's SHA-256" >&2
    exit 5
}
size_of() { set -- "$(wc -c <"$1")" && printf '%s\n' $(($1)); }
refuse() {
    printf '%s\n' "$1" >&2
    exit 3
}
# Refuses, unless each PATH of "$@" (not starting with `-`) is a name the caller would accept and resolves inside
# the root: one realpath for them all (a fork per file would cost more than the transfer).
all_inside() {
    for f do
        case $f in -*) refuse "$f: a name starting with -" ;; esac
        hostile "$f" && refuse "$f: a name with a control character, quote or backslash"
    done
    resolved=$(cd -- "$real" && { realpath -m -- "$@" 2>/dev/null || readlink -m -- "$@"; }) ||
        refuse "the paths could not be resolved"
    for f do
        c=${resolved%%"
"*}
        resolved=${resolved#*"
"}
        case $c in "$real"/*) ;; *) refuse "$f resolves outside the working directory" ;; esac
    done
}
# Names the caller would refuse too: control characters, quotes, backslashes.
hostile() {
    case $1 in *[[:cntrl:]]* | *[\'\"\\\`]*) return 0 ;; *) return 1 ;; esac
}
if [ "$verb" = probe ]; then
    mkdir -p -- "$root" || exit 1
fi
real=$(cd -P -- "$root" 2>/dev/null && pwd -P) || refuse "the working directory $root does not exist"
case $verb in
probe)
    need_digest
    printf 'root %s\n' "$real"
    [ "$(printf ab | { head -c 1 >/dev/null; cat; })" = b ] && echo trailer
    # One realpath for every destination (a fork each cost a second for a thousand files):
    # their resolved paths, a line each, in order, hostile names (which could hold a line
    # break) left out.
    paths= i=0
    for a do
        i=$((i + 1))
        [ $((i % 2)) -eq 1 ] && ! hostile "$a" && paths="$paths$real/$a
"
    done
    resolved=
    if [ -n "$paths" ]; then
        set -f
        IFS='
'
        resolved=$(realpath -m -- $paths 2>/dev/null || readlink -m -- $paths) || exit 1
        unset IFS
        set +f
    fi
    while [ $# -ge 2 ]; do
        p=$real/$1
        c=
        if ! hostile "$1"; then
            c=${resolved%%"
"*}
            resolved=${resolved#*"
"}
        fi
        case $c in "$real"/*) ;; *) c= ;; esac
        if [ -z "$c" ]; then
            echo "refused it resolves outside the working directory"
        elif [ -f "$p" ] && [ "$(size_of "$p")" = "$2" ]; then
            printf 'have %s\n' "$(digest <"$p")"
        else
            echo absent
        fi
        shift 2
    done
    ;;
put)
    dest=$1 size=$2 sum=${3-}
    p=$real/$dest
    hostile "$dest" && refuse "$dest: a name with a control character, quote or backslash"
    inside "$p" || refuse "$dest resolves outside the working directory"
    [ -d "$p" ] && refuse "$dest is a directory on the cluster"
    dir=${p%/*}
    mkdir -p -- "$dir" || exit 1
    inside "$dir" || refuse "$dest resolves outside the working directory"
    need_digest
    tmp=$dir/.${p##*/}.bb-partial.$$
    trap 'rm -f -- "$tmp"' EXIT
    trap 'rm -f -- "$tmp"; exit 1' HUP INT TERM PIPE
    # Hashed as it is written, so that checking costs no second read.
    if [ $# -ge 3 ]; then
        got_sum=$(write_and_hash "$tmp" -1) || exit 1
    else
        got_sum=$(write_and_hash "$tmp" "$size") || exit 1
        IFS= read -r sum || sum=
    fi
    got=$(size_of "$tmp")
    [ "$got" = "$size" ] || { echo "$dest arrived cut short: $got of $size bytes" >&2; exit 4; }
    [ -n "$sum" ] || { echo "$dest arrived without its SHA-256: the sender stopped" >&2; exit 4; }
    [ "$got_sum" = "$sum" ] || { echo "$dest arrived damaged: SHA-256 $got_sum, not $sum" >&2; exit 4; }
    mv -f -- "$tmp" "$p" || exit 1
    trap - EXIT
    ;;
unpack)
    sizes=$1 sums=$2
    shift 2
    need_digest
    all_inside "$@"
    for f do
        [ -d "$real/$f" ] && refuse "$f is a directory on the cluster"
    done
    tmp=$real/.unpack.bb-partial.$$
    mkdir -- "$tmp" || exit 1
    trap 'rm -rf -- "$tmp"' EXIT
    trap 'rm -rf -- "$tmp"; exit 1' HUP INT TERM PIPE
    # Only the members named, none with an absolute or `..` name (tar refuses those too),
    # never over an existing file's owner or mode.
    tar -x -f - -C "$tmp" --no-same-owner --no-same-permissions -- "$@" || {
        echo "the tar stream of the files arrived cut short or damaged" >&2
        exit 4
    }
    cd -- "$tmp" || exit 1
    [ -z "$(find . ! -type d ! -type f)" ] || refuse "the tar stream held something other than regular files"
    for f do
        [ -f "$f" ] && [ ! -L "$f" ] || { echo "$f is missing from the tar stream" >&2; exit 4; }
    done
    got=$(wc -c -- "$@" | awk -v n=$# 'NR <= n { print $1 }')
    [ "$got" = "$sizes" ] || { echo "files arrived cut short: sizes $got, not $sizes" | tr '\n' ' ' >&2; exit 4; }
    got=$(digests "$@")
    [ "$got" = "$sums" ] || { echo "files arrived damaged: SHA-256 $got, not $sums" | tr '\n' ' ' >&2; exit 4; }
    # Directories first (their realpath was checked above), then one mv per directory:
    # each file is renamed into place whole.
    find . -mindepth 1 -type d -exec sh -c 'cd -- "$0" && mkdir -p -- "$@"' "$real" {} + || exit 1
    find . -type d -exec sh -c '
        real=$0
        for d do
            set --
            for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
                [ -f "$f" ] && set -- "$@" "$f"
            done
            [ $# -eq 0 ] || mv -f -- "$@" "$real/$d/" || exit 1
        done' "$real" {} + || exit 1
    ;;
pack)
    need_digest
    all_inside "$@"
    cd -- "$real" || exit 1
    for f do
        [ -f "$f" ] || refuse "$f is not a regular file"
    done
    tar -c -h -f - -- "$@" || exit 1
    printf 'sizes %s\n' $(wc -c -- "$@" | awk -v n=$# 'NR <= n { print $1 }') >&2
    printf 'sums %s\n' $(digests "$@") >&2
    ;;
list)
    cd -- "$real" || exit 1
    # The files found under a pattern: checked here, where their names and targets are
    # known, with one realpath and one wc for them all (two forks a file cost seconds for a
    # thousand).
    each='
    real=$1 n=$2
    shift 2
    for f do
        shift
        case $f in *[[:cntrl:]]* | *[\'"'"'\"\\\`]*)
            printf "refused %s a name with a control character, quote or backslash\n" "$n"; continue ;;
        esac
        case ${f##*/} in .*.bb-partial.*) continue ;; esac
        set -- "$@" "$f"
    done
    [ $# -gt 0 ] || exit 0
    resolved=$(realpath -m -- "$@" 2>/dev/null || readlink -m -- "$@") || exit 1
    for f do
        shift
        c=${resolved%%"
"*}
        resolved=${resolved#*"
"}
        case $c in "$real"/*) ;; *)
            printf "refused %s %s resolves outside the working directory\n" "$n" "$f"; continue ;;
        esac
        if [ ! -f "$c" ]; then
            printf "refused %s %s is not a regular file\n" "$n" "$f"; continue
        fi
        set -- "$@" "$f"
    done
    [ $# -gt 0 ] || exit 0
    # A file gone or unreadable since it was found fails the listing (wc says which), rather
    # than shift the sizes of the rest onto the wrong names.
    counted=$(wc -c -- "$@") || exit 1
    sizes=$(printf "%s\n" "$counted" | awk -v n=$# "NR <= n { print \$1 }")
    for f do
        s=${sizes%%"
"*}
        sizes=${sizes#*"
"}
        printf "file %s %s %s\n" "$n" $((s)) "${f#./}"
    done'
    n=0
    for pattern do
        n=$((n + 1))
        found=
        # No field splitting, only pathname expansion, of the unquoted pattern.
        IFS=
        for m in $pattern; do
            [ -e "$m" ] || [ -L "$m" ] || continue
            found=1
            find "$m" \( -type f -o -type l \) -exec sh -c "$each" sh "$real" "$n" {} + || exit 1
        done
        unset IFS
        [ -n "$found" ] || printf 'missing %s\n' "$n"
    done
    ;;
fetch)
    p=$real/$1
    hostile "$1" && refuse "$1: a name with a control character, quote or backslash"
    inside "$p" || refuse "$1 resolves outside the working directory"
    c=$(canon "$p")
    [ -f "$c" ] || refuse "$1 is not a regular file"
    need_digest
    # The file goes out on stdout (fd 4 inside) while it is hashed beside it, two reads at
    # once instead of one after the other.
    exec 4>&1
    sum=$( { cat -- "$c" >&4 4>&-; } & sender=$!
        digest <"$c" 4>&-
        wait "$sender" || echo failed)
    case $sum in *failed*) exit 1 ;; esac
    printf 'size %s sha256 %s\n' "$(size_of "$c")" "$sum" >&2
    ;;
remove)
    # A path the caller would refuse, or one leading out, is skipped, not an error: what
    # is left to remove still goes.
    for f do
        if ! hostile "$f" && inside "$real/$f" && [ ! -d "$real/$f" ]; then
            rm -f -- "$real/$f" || exit 1
        fi
    done
    ;;
*)
    refuse "staging.sh: unknown verb $verb"
    ;;
esac
