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
# loaded one, an sbatch 6 ms): per job only the scheduler's command and `ln` run; readlink,
# mkdir, chmod, mv and rm run once per batch, head once per long script (short ones are read
# line by line by the builtin read, which reads a pipe a byte at a time). head -c reads
# exactly SIZE bytes (GNU, busybox and BSD head do); a head that read ahead would misalign
# the next script, which the MARK line catches.
# Hang-ups are ignored so that a dropped connection cannot stop it between the scheduler's
# reply and recording the id; once a record cannot be printed (the caller is gone), the jobs
# after it are not sent and their keys released.
trap '' HUP PIPE
set -u
work=$1 mark=$2 count=$3
umask 077
stage=$work/claiming/$mark
# Who claims: this boot of this machine (boot_id), this pid namespace and this shell, in each
# claimed directory's `claim` file and in the staging directory's `+owner` (no key has a
# `+`). A later batch on the same machine that finds a key claimed, without a job and never
# sent (no submit.stderr, created before the scheduler is asked), by a shell that no longer
# runs, takes the key over (take_over), and removes such a shell's staging directory: a
# batch killed outright leaves no key claimed and nothing staged for good. Elsewhere, or
# without /proc, a claim is never taken over. One fork per batch (readlink).
owner=
if read -r boot </proc/sys/kernel/random/boot_id 2>/dev/null &&
    ns=$(readlink "/proc/$$/ns/pid" 2>/dev/null); then
    owner="$boot $ns $$ $mark"
fi
# dead FILE: FILE names a shell of this machine that no longer runs; its MARK in old_mark.
dead() {
    [ -n "$owner" ] && read -r old_boot old_ns old_pid old_mark <"$1" 2>/dev/null &&
        [ -n "$old_mark" ] && [ "$old_boot $old_ns" = "$boot $ns" ] && ! [ -d "/proc/$old_pid" ]
}
for left in "$work"/claiming/*/+owner; do
    ! dead "$left" || rm -rf -- "${left%/+owner}"
done
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
[ -z "$owner" ] || printf '%s\n' "$owner" >"$stage/+owner"
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
    [ -n "$broken" ] || printf '%s\n' "$owner" >"$dir/claim" || broken="cannot write $dir/claim"
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
# take_over DIR STAGED: DIR's claim is stale (see `owner` above): moves it aside and claims
# DIR with STAGED in its place. Of several batches that find it stale, the one whose mkdir
# of DIR/stale.MARK succeeds (MARK, the dead claim's) goes on, once it has read the claim
# again: a batch that read it before another took it over finds a new MARK and backs off.
take_over() {
    ! [ -e "$1/submit.stderr" ] && ! [ -e "$1/job_id" ] && dead "$1/claim" || return 1
    mkdir "$1/stale.$old_mark" 2>/dev/null || return 1
    if ! read -r _ _ _ now <"$1/claim" || [ "$now" != "$old_mark" ] || [ -e "$1/submit.stderr" ]; then
        rmdir "$1/stale.$old_mark"
        return 1
    fi
    mv -f -- "$1" "$stage/+stale" && mv -f -- "$2" "$work/jobs/" 2>/dev/null
    taken=$?
    rm -rf -- "$stage/+stale"
    return "$taken"
}
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
    elif [ -d "$stage/$key" ] && ! { [ -z "$gone" ] && take_over "$dir" "$stage/$key"; }; then
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
    elif ! : >"$dir/submit.stderr"; then
        # It marks the key as sent (take_over): without it the scheduler is not asked.
        rm -rf -- "$dir"
        fail @SUBMIT_NOT_SENT@ "cannot write $dir/submit.stderr"
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
