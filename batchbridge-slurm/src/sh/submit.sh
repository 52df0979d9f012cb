# Submits one job: `sh -c "$SUBMIT" sh WORK KEY BATCH_LEN ENV_LEN TASKS SBATCH_OPTION...` with
# the batch script, the environment file and the job script back to back on stdin.
# Prints `submitted ID`, `existing ID` (the key already has a job) or `claimed` (a submit of
# the key is in flight). Exits 71 with sbatch's message when sbatch refuses the job.
# Hang-ups are ignored so that a dropped connection cannot stop it between sbatch and
# recording the id.
trap '' HUP PIPE
set -u
work=$1 key=$2 batch_len=$3 env_len=$4 tasks=$5
shift 5
dir=$work/jobs/$key
umask 077
mkdir -p "$work/jobs" "$work/ids" || exit 70
# mkdir is atomic: of two submits of one key, one claims it.
if ! mkdir "$dir" 2>/dev/null; then
    if [ -s "$dir/job_id" ]; then
        printf 'existing %s\n' "$(cat "$dir/job_id")"
    else
        echo claimed
    fi
    exit 0
fi
take() { dd of="$dir/$1" bs="$2" count=1 iflag=fullblock 2>/dev/null; }
if ! { take job.sh "$batch_len" && take env.sh "$env_len" && cat >"$dir/script.sh" &&
    printf '%s\n' "$tasks" >"$dir/tasks"; }; then
    echo "cannot write the job directory $dir" >&2
    rm -rf "$dir"
    exit 70
fi
# A refused job releases its key, so that a corrected spec can be submitted under it.
if ! reply=$(sbatch --parsable "$@" "$dir/job.sh"); then
    rm -rf "$dir"
    exit 71
fi
id=${reply%%;*}
ln -sfn "../jobs/$key" "$work/ids/$id"
printf '%s\n' "$id" >"$dir/job_id.tmp" && mv -f "$dir/job_id.tmp" "$dir/job_id"
printf 'submitted %s\n' "$id"
