# batchbridge's wrapper for one at job, with `enter_working_dir`
# (batchbridge_core::remote::ENTER_WORKING_DIR) defined below and core's exit codes filled in
# (batchbridge_core::remote::render_script). at starts it with /bin/sh in
# the job's directory (the one it was queued from) and in atd's own process group, so the
# script runs in a process group of its own: a cancel stops all of it and nothing else. How
# it ended goes to task-0.exit, which the backend reads once at has forgotten the job, and
# its start and end are job events (job_event) for the follower to push.
dir=$PWD
@ENTER_WORKING_DIR@
@JOB_EVENT@
job_id=
# `record exit|signal N`: how the job ended, in task-0.exit, then as a job event (none
# while its number is not known yet).
record() {
    rm -f "$dir/wrapper.pid"
    printf '%s %s\n' "$1" "$2" >"$dir/task-0.exit.tmp" && mv -f "$dir/task-0.exit.tmp" "$dir/task-0.exit"
    job_event "$dir" "$job_id" 0 "$1" "$2"
}
script=
# cancel.sh sends SIGTERM to the pid in wrapper.pid, and at sends nothing else: the wrapper
# passes it on to the script's process group and, where a scheduler would, sends SIGKILL to
# what is left of the group once a grace of 10 s has passed (or once the script's first
# process ended), so that a script ignoring SIGTERM cannot outlive its job while one that
# saves its work on SIGTERM has the time to. The cancel is recorded first: the wrapper
# itself may be killed meanwhile. A second cancel changes nothing. (dash's kill takes no
# `--`.)
stop() {
    trap '' TERM
    record signal 15
    if [ -n "$script" ]; then
        kill -TERM "-$script" 2>/dev/null
        (
            for _ in 1 2 3 4 5 6 7 8 9 10; do sleep 1; done
            kill -KILL "-$script" 2>/dev/null
        ) </dev/null >/dev/null 2>&1 &
        killer=$!
        wait "$script"
        kill -KILL "-$script" 2>/dev/null
        kill -KILL "$killer" 2>/dev/null
    fi
    exit 143
}
trap stop TERM
echo "$$" >"$dir/wrapper.pid"
# A cancel that came just as atd started the job: the script never runs.
[ -e "$dir/cancel-requested" ] && { record signal 15; exit 143; }
# atd may start the job before the submit has recorded its number.
tries=0
while [ ! -s "$dir/job_id" ] && [ "$tries" -lt 300 ]; do
    sleep 0.1
    tries=$((tries + 1))
done
[ -s "$dir/job_id" ] && read -r job_id <"$dir/job_id"
job_event "$dir" "$job_id" 0 started
workdir=$dir
[ -f "$dir/workdir" ] && workdir=$(cat "$dir/workdir")
# The script inherits the directory; one that cannot be entered fails the job, saying why
# in its stderr and in task-0.reason.
enter_working_dir "$workdir" "$dir/task-0.reason" 2>"$dir/task-0.stderr" || {
    record exit @NOT_STARTED@
    exit @NOT_STARTED@
}
# Found before env.sh applies the job's PATH, which need not hold it.
bash=$(command -v bash) || {
    why="the script never ran: no bash in PATH $PATH"
    printf '%s\n' "$why" >"$dir/task-0.reason"
    printf 'batchbridge: %s\n' "$why" >"$dir/task-0.stderr"
    record exit @NOT_STARTED@
    exit @NOT_STARTED@
}
# Positional parameters, not variables: env.sh may set any variable name.
setsid sh -c '. "$2/env.sh" || exit @NOT_STARTED@
export BATCHBRIDGE_TASK_INDEX=0 BATCHBRIDGE_JOB_ID="$3"
exec "$4" "$1"' sh "$dir/script.sh" "$dir" "$job_id" "$bash" \
    </dev/null >"$dir/task-0.stdout" 2>"$dir/task-0.stderr" &
script=$!
wait "$script"
rc=$?
script=
record exit "$rc"
exit "$rc"
