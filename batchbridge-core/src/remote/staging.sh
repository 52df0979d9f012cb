# Stages files in and out of a job's working directory ROOT:
#   `sh -c "$STAGING" sh probe ROOT DEST SIZE...`  creates ROOT; prints `root REAL`, then per
#       DEST `have SHA` (a regular file of SIZE bytes is there), `absent` or `refused WHY`
#   `sh -c "$STAGING" sh put ROOT DEST SIZE SHA`  stdin to DEST: written to a hidden temporary
#       name beside it, its size and SHA-256 checked, then renamed into place
#   `sh -c "$STAGING" sh list ROOT PATTERN...`  per file PATTERN N (a path or glob, a
#       directory taken whole) matches: `file N SIZE PATH`; `missing N` when it matches
#       nothing, `refused N WHY` for a file that may not leave
#   `sh -c "$STAGING" sh fetch ROOT PATH`  PATH on stdout, then `size SIZE sha256 SHA` on stderr
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
# The SHA-256 of standard input, with whichever tool the cluster has; `digest_tool` is empty
# when it has none.
if command -v sha256sum >/dev/null 2>&1; then
    digest_tool=sha256sum
    digest() { set -- "$(sha256sum)" && printf '%s\n' "${1%% *}"; }
elif command -v shasum >/dev/null 2>&1; then
    digest_tool=shasum
    digest() { set -- "$(shasum -a 256)" && printf '%s\n' "${1%% *}"; }
elif command -v openssl >/dev/null 2>&1; then
    digest_tool=openssl
    digest() { set -- "$(openssl dgst -sha256)" && printf '%s\n' "${1##* }"; }
else
    digest_tool=
fi
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
    while [ $# -ge 2 ]; do
        p=$real/$1
        if hostile "$1" || ! inside "$p"; then
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
    dest=$1 size=$2 sum=$3
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
    got_sum=$(tee -- "$tmp" | digest) || exit 1
    got=$(size_of "$tmp")
    [ "$got" = "$size" ] || { echo "$dest arrived cut short: $got of $size bytes" >&2; exit 4; }
    [ "$got_sum" = "$sum" ] || { echo "$dest arrived damaged: SHA-256 $got_sum, not $sum" >&2; exit 4; }
    mv -f -- "$tmp" "$p" || exit 1
    trap - EXIT
    ;;
list)
    cd -- "$real" || exit 1
    # One file found under a pattern: checked here, where its name and target are known.
    each='
    real=$1 n=$2
    shift 2
    for f do
        case $f in *[[:cntrl:]]* | *[\'"'"'\"\\\`]*)
            printf "refused %s a name with a control character, quote or backslash\n" "$n"; continue ;;
        esac
        case ${f##*/} in .*.bb-partial.*) continue ;; esac
        c=$(realpath -m -- "$f" 2>/dev/null || readlink -m -- "$f")
        case $c in "$real"/*) ;; *)
            printf "refused %s %s resolves outside the working directory\n" "$n" "$f"; continue ;;
        esac
        if [ ! -f "$c" ]; then
            printf "refused %s %s is not a regular file\n" "$n" "$f"; continue
        fi
        s=$(wc -c <"$c")
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
