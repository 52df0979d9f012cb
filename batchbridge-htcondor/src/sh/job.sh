#!/bin/sh
# batchbridge's wrapper for one proc of an HTCondor cluster:
# `job.sh PROC CLUSTER JOB_DIR WORKING_DIR`, with `enter_working_dir`
# (batchbridge_core::remote::ENTER_WORKING_DIR) defined below. HTCondor records how the
# script ended (ExitCode, ExitBySignal), so the wrapper only sets the scene: it enters the
# working directory itself, since HTCondor's initialdir is the job directory, and exits
# @NOT_STARTED@ with task-PROC.reason beside the output when it cannot (the placeholders are
# filled in by batchbridge_core::remote::render_script). Without a shared file system HTCondor
# runs it in a scratch directory that holds the transferred script.sh and env.sh, and brings
# the reason file back with the output.
dir=$3
[ -r "$dir/script.sh" ] || dir=$PWD
@ENTER_WORKING_DIR@
enter_working_dir "$4" "$dir/task-$1.reason" || exit @NOT_STARTED@
# Found before env.sh applies the job's PATH, which need not hold it.
bash=$(command -v bash) || {
    why="the script never ran: no bash in PATH $PATH"
    printf '%s\n' "$why" >"$dir/task-$1.reason"
    printf 'batchbridge: %s\n' "$why" >&2
    exit @NOT_STARTED@
}
# Positional parameters, not variables: env.sh may set any variable name.
set -- "$dir/script.sh" "$1" "$2" "$bash"
. "$dir/env.sh" || exit @NOT_STARTED@
export BATCHBRIDGE_TASK_INDEX="$2" BATCHBRIDGE_JOB_ID="$3"
# HTCondor sends a removed job's SIGTERM to this process, the script once exec'd, and
# SIGKILL to every process it started once the vacate time has passed.
exec "$4" "$1"
