# Submits one job: `sh -c "$SUBMIT" sh WORK KEY TASKS BATCH_SCRIPT ENV_FILE SBATCH_OPTION...`
# with the job's script on stdin. Prints `submitted ID`, `existing ID` (the key already has a
# job) or `claimed` (a submit of the key is in flight). Exits 71 with sbatch's message when
# sbatch refuses the job. Only builtins besides mkdir, cat, sbatch and ln: forks are what a
# submit costs on a busy login node.
# Hang-ups are ignored so that a dropped connection cannot stop it between sbatch and
# recording the id.
trap '' HUP PIPE
set -u
work=$1 key=$2 tasks=$3 batch=$4 environment=$5
shift 5
dir=$work/jobs/$key
umask 077
# mkdir is atomic: of two submits of one key, one claims it.
if ! mkdir "$dir" 2>/dev/null; then
    if [ -s "$dir/job_id" ]; then
        read -r id <"$dir/job_id"
        printf 'existing %s\n' "$id"
    else
        echo claimed
    fi
    exit 0
fi
if ! { printf '%s' "$batch" >"$dir/job.sh" && printf '%s' "$environment" >"$dir/env.sh" &&
    printf '%s\n' "$tasks" >"$dir/tasks" && cat >"$dir/script.sh"; }; then
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
printf '%s\n' "$id" >"$dir/job_id"
printf 'submitted %s\n' "$id"
