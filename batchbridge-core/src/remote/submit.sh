# Submits one job: `sh -c "$SUBMIT" sh WORK KEY SIZE NFILES NAME CONTENT... -- COMMAND...`
# with the job's script (SIZE bytes) on stdin. Claims WORK/jobs/KEY, writes script.sh from
# stdin and each NAME with its CONTENT (job.sh is made executable), runs COMMAND, and records
# the id it printed (its leading digits). Prints `submitted ID`, `existing ID` (the key
# already has a job) or `claimed` (a submit of the key is in flight or was cut off). Exits
# @SUBMIT_REFUSED@ with the scheduler's message when it refuses the job, @SUBMIT_NO_ID@ when it
# printed no id, @SUBMIT_NOT_SENT@ (the key released) when it stopped before asking it, and
# @SUBMIT_ID_TAKEN@ with `ID OTHER_KEY` on stderr when the scheduler gave an id that links to
# another key's job (then, and on every later submit of the key, which keeps its directory).
# Those placeholders are batchbridge_core::remote's exit codes, filled in by render_script.
# Builtins besides mkdir, cat, wc, chmod and ln: forks are what a submit costs on a busy login
# node.
# Hang-ups are ignored so that a dropped connection cannot stop it between the scheduler's
# reply and recording the id.
trap '' HUP PIPE
set -u
work=$1 key=$2 size=$3 nfiles=$4
shift 4
dir=$work/jobs/$key
umask 077
# mkdir is atomic: of two submits of one key, one claims it.
if ! mkdir "$dir" 2>/dev/null; then
    if [ -s "$dir/job_id" ]; then
        read -r id <"$dir/job_id"
        printf 'existing %s\n' "$id"
    elif [ -s "$dir/id_taken" ]; then
        cat "$dir/id_taken" >&2
        exit @SUBMIT_ID_TAKEN@
    else
        echo claimed
    fi
    exit 0
fi
fail() {
    printf '%s\n' "$1" >&2
    rm -rf "$dir"
    exit "$2"
}
while [ "$nfiles" -gt 0 ]; do
    printf '%s' "$2" >"$dir/$1" || fail "cannot write $dir/$1" @SUBMIT_NOT_SENT@
    shift 2
    nfiles=$((nfiles - 1))
done
[ "$1" = -- ] || fail "submit.sh: expected -- before the command" @SUBMIT_NOT_SENT@
shift
cat >"$dir/script.sh" || fail "cannot write $dir/script.sh" @SUBMIT_NOT_SENT@
# A connection dropped mid-upload ends stdin early, and hang-ups are ignored: a script cut
# short must never reach the scheduler. Failing releases the key for the next submit.
got=$(wc -c <"$dir/script.sh") || fail "cannot read $dir/script.sh" @SUBMIT_NOT_SENT@
got=${got##* }
[ "$got" = "$size" ] || fail "the script arrived cut short: $got of $size bytes" @SUBMIT_NOT_SENT@
if [ -f "$dir/job.sh" ]; then chmod u+x "$dir/job.sh" || fail "cannot chmod $dir/job.sh" @SUBMIT_NOT_SENT@; fi
# A refused job releases its key, so that a corrected spec can be submitted under it.
reply=$("$@") || { rm -rf "$dir"; exit @SUBMIT_REFUSED@; }
id=${reply%%[!0-9]*}
[ -n "$id" ] || { printf 'the scheduler printed no job id: %s\n' "$reply" >&2; exit @SUBMIT_NO_ID@; }
# An id links to one job forever: a scheduler that gave it again (its numbering restarted)
# must not turn the old job's status, output and events into the new one's. A link whose job
# directory is gone (removed by hand) is no job's any more.
link=$work/ids/$id
if ! ln -sn "../jobs/$key" "$link" 2>/dev/null && ! [ "$link" -ef "$dir" ]; then
    if [ -d "$link" ]; then
        other=$(cd -P "$link" && pwd) || other=?
        printf '%s %s\n' "$id" "${other##*/}" >"$dir/id_taken"
        cat "$dir/id_taken" >&2
        exit @SUBMIT_ID_TAKEN@
    fi
    ln -sfn "../jobs/$key" "$link"
fi
printf '%s\n' "$id" >"$dir/job_id"
printf 'submitted %s\n' "$id"
