# Submits N >= 1 jobs in one remote command:
# `sh -c "$SUBMIT" sh WORK MARK N` followed, per job, by
# `KEY SIZE NFILES NAME CONTENT... NWORDS WORD...`, with the jobs' scripts on stdin in the
# same order, each followed by the line `MARK KEY` (MARK: a nonce of the caller's, fresh for
# each batch, so that no script can forge it): SIZE bytes of it, or, when SIZE is `lines`
# (or `lines-no-eol`: the last line has no newline, which the sender added), its lines up to
# that end line. Writes each job's files (job.sh made executable)
# into a staging directory WORK/claiming/MARK/KEY, then claims WORK/jobs/KEY for each by
# moving its staged directory there, runs each claimed job's NWORDS words as the scheduler's
# command (stdin empty) and records the id it printed (its leading digits).
# For each job, in order, it prints one record: the line `KEY OUTCOME ID LENGTH`, then LENGTH
# bytes of message. OUTCOME is `submitted` or `existing` (the key already has a job) with its
# ID, `claimed` (a submit of the key is in flight or was cut off), or an exit code:
# @SUBMIT_REFUSED@ with the scheduler's message when it refused the job (the key released),
# @SUBMIT_NO_ID@ when it printed no id, @SUBMIT_NOT_SENT@ (the key released, or never claimed)
# when the job stopped before the scheduler was asked, @SUBMIT_ID_TAKEN@ with `ID OTHER_KEY`
# when the scheduler gave an id that links to another key's job (then, and on every later
# submit of the key, which keeps its directory). Those codes are batchbridge_core::remote's,
# filled in by render_script.
# Forks are what a submit costs on a busy login node (a fork and exec is 1.5 to 2.5 ms on a
# loaded one, an sbatch 6 ms): per job only the scheduler's command and `ln` run; mkdir, chmod,
# mv and rm run once per batch, head once per long script (short ones are read line by line
# by the builtin read, which reads a pipe a byte at a time). head -c reads exactly SIZE
# bytes (GNU, busybox and BSD head do); a head that read ahead would misalign the next script,
# which the MARK line catches.
# Hang-ups are ignored so that a dropped connection cannot stop it between the scheduler's
# reply and recording the id; once a record cannot be printed (the caller is gone), the jobs
# after it are not sent and their keys released.
trap '' HUP PIPE
set -u
work=$1 mark=$2 count=$3
umask 077
stage=$work/claiming/$mark
# Values are read by position (`${N}`, N a number this script computed): eval only ever sees
# those references, never a value. Job n's arguments start at ${at_n}.
at=4 n=1 staged=
while [ "$n" -le "$count" ]; do
    eval "at_$n=$at nfiles=\${$((at + 2))}"
    eval "words=\${$((at + 3 + nfiles * 2))}"
    staged="$staged \"\$stage/\${$at}\""
    at=$((at + 4 + nfiles * 2 + words))
    n=$((n + 1))
done
eval "mkdir -p -- $staged" 2>/dev/null
# Job n's state: why it cannot be sent (broken_n), and whether it has a job.sh (script_n).
# Once one script could not be read whole, where the next one starts is lost: every later
# job is not sent.
lost= executable= n=1
while [ "$n" -le "$count" ]; do
    eval "at=\$at_$n"
    eval "key=\${$at} size=\${$((at + 1))} nfiles=\${$((at + 2))}"
    dir=$stage/$key broken= script=
    i=$((at + 3))
    while [ "$i" -lt $((at + 3 + nfiles * 2)) ] && [ -z "$broken" ]; do
        eval "name=\${$i} content=\${$((i + 1))}"
        printf '%s' "$content" >"$dir/$name" || broken="cannot write $dir/$name"
        if [ "$name" = job.sh ]; then
            script=1 executable="$executable \"\$stage/\${$at}/job.sh\""
        fi
        i=$((i + 2))
    done
    # A connection dropped mid-upload ends stdin early, and hang-ups are ignored: a script
    # cut short must never reach the scheduler.
    if [ -z "$lost" ]; then
        case $size in
        lines | lines-no-eol)
            # Line by line with the builtin read, up to the end line: no fork.
            text= end=
            while IFS= read -r line; do
                if [ "$line" = "$mark $key" ]; then
                    end=1
                    break
                fi
                text="$text$line
"
            done
            [ "$size" = lines ] || text=${text%?}
            if [ -z "$end" ]; then
                lost="the script of job $key arrived cut short; this job was not sent"
            elif [ -z "$broken" ]; then
                printf '%s' "$text" >"$dir/script.sh" || broken="cannot write $dir/script.sh"
            fi
            ;;
        *)
            if ! head -c "$size" >"$dir/script.sh" || ! read -r end || [ "$end" != "$mark $key" ]; then
                lost="the script of job $key arrived cut short; this job was not sent"
            fi
            ;;
        esac
    fi
    [ -z "$lost" ] || broken=${broken:-$lost}
    eval "broken_$n=\$broken script_$n=\$script"
    n=$((n + 1))
done
chmodded=1
if [ -n "$executable" ]; then eval "chmod u+x -- $executable" || chmodded=; fi
moving= n=1
while [ "$n" -le "$count" ]; do
    eval "at=\$at_$n broken=\$broken_$n script=\$script_$n"
    if [ -z "$broken" ] && [ -n "$script" ] && [ -z "$chmodded" ]; then
        eval "broken_$n=\"cannot chmod \$work/jobs/\${$at}/job.sh\""
    elif [ -z "$broken" ]; then
        moving="$moving \"\$stage/\${$at}\""
    fi
    n=$((n + 1))
done
# The claim: rename(2) of a directory that is not empty onto a key's directory that exists
# fails, so of two submits of one key, one claims it; a staged directory still there after
# mv lost its key to another submit.
[ -z "$moving" ] || eval "mv -f -- $moving \"\$work/jobs/\"" 2>/dev/null
# gone: the caller is, so records cannot be printed.
gone=
# fail CODE MESSAGE: this job's record with a message (forks are fine on this path).
fail() {
    length=$(printf '%s' "$2" | wc -c) || length=0
    printf '%s %s - %s\n%s' "$key" "$1" "${length##* }" "$2" || gone=1
}
n=1
while [ "$n" -le "$count" ]; do
    eval "at=\$at_$n broken=\$broken_$n"
    eval "key=\${$at} nfiles=\${$((at + 2))}"
    eval "words=\${$((at + 3 + nfiles * 2))}"
    # The scheduler's command: `"${N}" "${N+1}"…`.
    command= i=$((at + 4 + nfiles * 2))
    while [ "$i" -lt $((at + 4 + nfiles * 2 + words)) ]; do
        command="$command \"\${$i}\""
        i=$((i + 1))
    done
    dir=$work/jobs/$key
    n=$((n + 1))
    if [ -n "$broken" ]; then
        fail @SUBMIT_NOT_SENT@ "$broken"
    elif [ -d "$stage/$key" ]; then
        if [ -s "$dir/job_id" ]; then
            read -r id <"$dir/job_id"
            printf '%s existing %s 0\n' "$key" "$id" || gone=1
        elif [ -s "$dir/id_taken" ]; then
            read -r taken <"$dir/id_taken"
            fail @SUBMIT_ID_TAKEN@ "$taken"
        elif [ -d "$dir" ]; then
            printf '%s claimed - 0\n' "$key" || gone=1
        else
            fail @SUBMIT_NOT_SENT@ "cannot move $stage/$key to $dir"
        fi
    elif [ -n "$gone" ]; then
        # Nobody would learn of the job: the key is released for the next submit instead.
        rm -rf -- "$dir"
    elif ! eval "reply=\$(${command} </dev/null 2>\"\$dir/submit.stderr\")"; then
        # A refused job releases its key, so that a corrected spec can be submitted under it.
        said=$(head -c 16384 "$dir/submit.stderr")
        rm -rf -- "$dir"
        fail @SUBMIT_REFUSED@ "$said"
    else
        id=${reply%%[!0-9]*}
        link=$work/ids/$id
        # An id links to one job forever: a scheduler that gave it again (its numbering
        # restarted) must not turn the old job's status, output and events into the new
        # one's. A link whose job directory is gone (removed by hand) is no job's any more.
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
            printf '%s submitted %s 0\n' "$key" "$id" || gone=1
        fi
    fi
done
rm -rf -- "$stage"
