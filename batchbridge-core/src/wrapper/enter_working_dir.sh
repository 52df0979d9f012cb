# `enter_working_dir DIR REASON_FILE`: enters DIR, or says why it cannot (on stderr and in
# REASON_FILE) and fails, so that a job's script never runs in another directory than the
# one its spec names. Every job wrapper runs it before anything of the job's own, and exits
# 70 when it fails. POSIX sh; positional parameters, not variables, so that it sets none.
enter_working_dir() {
    cd -- "$1" 2>/dev/null && return 0
    if [ ! -e "$1" ]; then
        set -- "$1" "$2" "it does not exist (or a parent directory cannot be searched)"
    elif [ ! -d "$1" ]; then
        set -- "$1" "$2" "it is not a directory"
    else
        set -- "$1" "$2" "permission denied"
    fi
    set -- "$2" "the script never ran: cannot enter its working directory $1: $3"
    printf '%s\n' "$2" >"$1"
    printf 'batchbridge: %s\n' "$2" >&2
    return 1
}
