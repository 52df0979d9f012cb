#!/bin/sh
# batchbridge's wrapper for one proc of an HTCondor cluster: `job.sh PROC CLUSTER JOB_DIR`.
# HTCondor records how the script ended (ExitCode, ExitBySignal), so the wrapper only sets
# the scene. Without a shared file system HTCondor runs it in a scratch directory that
# holds the transferred script.sh and env.sh.
dir=$3
[ -r "$dir/script.sh" ] || dir=$PWD
# Positional parameters, not variables: env.sh may set any variable name.
set -- "$dir/script.sh" "$1" "$2"
. "$dir/env.sh" || exit 70
export BATCHBRIDGE_TASK_INDEX="$2" BATCHBRIDGE_JOB_ID="$3"
exec bash "$1"
