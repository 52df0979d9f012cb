# Submits N >= 1 jobs, one after another, in one remote command:
# `sh -c "$SUBMIT" sh WORK MARK N` followed, per job, by
# `KEY SIZE NFILES NAME CONTENT... NWORDS WORD...`, with the jobs' scripts on stdin in the
# same order, each SIZE bytes followed by the line `MARK KEY` (MARK: a nonce of the caller's,
# so that no script can forge it). Per job: claims WORK/jobs/KEY, writes script.sh from stdin
# and each NAME with its CONTENT (job.sh is made executable), runs its NWORDS words as the
# scheduler's command (stdin empty) and records the id it printed (its leading digits).
# For each job, in order, it prints one record: the line `KEY OUTCOME ID LENGTH`, then LENGTH
# bytes of message. OUTCOME is `submitted` or `existing` (the key already has a job) with its
# ID, `claimed` (a submit of the key is in flight or was cut off), or an exit code:
# @SUBMIT_REFUSED@ with the scheduler's message when it refused the job (the key released),
# @SUBMIT_NO_ID@ when it printed no id, @SUBMIT_NOT_SENT@ (the key released, or never claimed)
# when the job stopped before the scheduler was asked, @SUBMIT_ID_TAKEN@ with `ID OTHER_KEY`
# when the scheduler gave an id that links to another key's job (then, and on every later
# submit of the key, which keeps its directory). Those codes are batchbridge_core::remote's,
# filled in by render_script.
# Builtins besides mkdir, head, chmod and ln on the way of a job that is submitted: forks are
# what a submit costs on a busy login node. head -c reads exactly SIZE bytes (GNU, busybox and
# BSD head do); a head that read ahead would misalign the next script, which the MARK line
# catches.
# Hang-ups are ignored so that a dropped connection cannot stop it between the scheduler's
# reply and recording the id; a record it can no longer print (the caller is gone) ends the
# batch after that job, recorded.
trap '' HUP PIPE
set -u
work=$1 mark=$2 count=$3
shift 3
umask 077
# Once one script could not be read whole, where the next one starts is lost: every later
# job is not sent.
lost=
# fail CODE MESSAGE: this job's record with a message (forks are fine on this path).
fail() {
    length=$(printf '%s' "$2" | wc -c) || length=0
    printf '%s %s - %s\n%s' "$key" "$1" "${length##* }" "$2" || exit 0
}
while [ "$count" -gt 0 ]; do
    count=$((count - 1))
    key=$1 size=$2 nfiles=$3
    shift 3
    dir=$work/jobs/$key
    # Values are read by position (`${N}`, N a number this script computed): eval only ever
    # sees those references, never a value.
    eval "words=\${$((nfiles * 2 + 1))}"
    # The scheduler's command: `"${N}" "${N+1}"…`.
    command= i=$((nfiles * 2 + 2))
    while [ "$i" -le $((nfiles * 2 + 1 + words)) ]; do
        command="$command \"\${$i}\""
        i=$((i + 1))
    done
    if [ -n "$lost" ]; then
        fail @SUBMIT_NOT_SENT@ "$lost"
    # mkdir is atomic: of two submits of one key, one claims it.
    elif ! mkdir "$dir" 2>/dev/null; then
        head -c "$size" >/dev/null && read -r end && [ "$end" = "$mark $key" ] ||
            lost="the script of job $key arrived cut short; this job was not sent"
        if [ -s "$dir/job_id" ]; then
            read -r id <"$dir/job_id"
            printf '%s existing %s 0\n' "$key" "$id" || exit 0
        elif [ -s "$dir/id_taken" ]; then
            read -r taken <"$dir/id_taken"
            fail @SUBMIT_ID_TAKEN@ "$taken"
        else
            printf '%s claimed - 0\n' "$key" || exit 0
        fi
    else
        # Why the job cannot be sent, once something failed.
        broken=
        i=1
        while [ "$i" -lt $((nfiles * 2)) ] && [ -z "$broken" ]; do
            eval "name=\${$i} content=\${$((i + 1))}"
            printf '%s' "$content" >"$dir/$name" || broken="cannot write $dir/$name"
            i=$((i + 2))
        done
        # A connection dropped mid-upload ends stdin early, and hang-ups are ignored: a
        # script cut short must never reach the scheduler.
        if ! head -c "$size" >"$dir/script.sh" || ! read -r end || [ "$end" != "$mark $key" ]; then
            lost="the script of job $key arrived cut short; this job was not sent"
            broken=${broken:-$lost}
        fi
        if [ -z "$broken" ] && [ -f "$dir/job.sh" ]; then
            chmod u+x "$dir/job.sh" || broken="cannot chmod $dir/job.sh"
        fi
        if [ -n "$broken" ]; then
            # Failing releases the key for the next submit.
            rm -rf "$dir"
            fail @SUBMIT_NOT_SENT@ "$broken"
        elif ! eval "reply=\$(${command} </dev/null 2>\"\$dir/submit.stderr\")"; then
            # A refused job releases its key, so that a corrected spec can be submitted
            # under it.
            said=$(head -c 16384 "$dir/submit.stderr")
            rm -rf "$dir"
            fail @SUBMIT_REFUSED@ "$said"
        else
            id=${reply%%[!0-9]*}
            link=$work/ids/$id
            # An id links to one job forever: a scheduler that gave it again (its numbering
            # restarted) must not turn the old job's status, output and events into the
            # new one's. A link whose job directory is gone (removed by hand) is no job's
            # any more.
            if [ -z "$id" ]; then
                fail @SUBMIT_NO_ID@ "the scheduler printed no job id: $reply"
            elif ! ln -sn "../jobs/$key" "$link" 2>/dev/null && ! [ "$link" -ef "$dir" ] &&
                [ -d "$link" ]; then
                other=$(cd -P "$link" && pwd) || other=?
                printf '%s %s\n' "$id" "${other##*/}" >"$dir/id_taken"
                fail @SUBMIT_ID_TAKEN@ "$id ${other##*/}"
            else
                [ -L "$link" ] && [ "$link" -ef "$dir" ] || ln -sfn "../jobs/$key" "$link"
                printf '%s\n' "$id" >"$dir/job_id"
                printf '%s submitted %s 0\n' "$key" "$id" || exit 0
            fi
        fi
    fi
    shift $((nfiles * 2 + 1 + words))
done
