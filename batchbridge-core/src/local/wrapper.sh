# The local backend's job wrapper, run as `bash -c "$WRAPPER" bash JOB_DIR SLOTS_DIR CAPACITY
# TASKS MAX_PARALLEL CPUS WORKING_DIR` in a process group of its own, with `enter_working_dir`
# (batchbridge_core::wrapper::ENTER_WORKING_DIR), `job_event` (JOB_EVENT: each task's start
# and exit code as an event file) and core's exit codes filled in by
# batchbridge_core::wrapper::render_script. Every value arrives as a positional parameter,
# never as code. It outlives the program that started it; all state
# is in files.
@ENTER_WORKING_DIR@
@JOB_EVENT@
set -u
job=$1 slots=$2 capacity=$3 tasks=$4 parallel=$5 cpus=$6 workdir=$7
# The job's id is its directory's name: STATE_DIR/jobs/ID. Its events go to STATE_DIR/events.
id=${job##*/}

# Take `cpus` of the `capacity` slot locks, all or none, so that two jobs can never each hold
# half of what they need. A job asking for more than the capacity waits forever, Queued.
# One waiting task at a time tries the slots, holding the queue lock; the others sleep in a
# blocking flock on it, so tasks start in the order they queued, and a thousand waiting
# tasks cost nothing (each polling on its own forked a flock per slot every 0.2 s: 2000 of
# them took a 2-core machine to a load of 1800).
acquire_slots() {
    local s fd queue
    if ((cpus > capacity)); then
        # Never runs: waits without the queue, which it would hold forever.
        while [ -d "$job" ]; do sleep 5; done
        exit 0
    fi
    exec {queue}>>"$slots/queue"
    flock "$queue"
    while :; do
        # A state directory removed under a waiting job (a test's temporary one, say) leaves
        # nothing to run it for: stop waiting rather than loop forever.
        [ -d "$job" ] || exit 0
        held=()
        for ((s = 0; s < capacity && ${#held[@]} < cpus; s++)); do
            exec {fd}>>"$slots/$s"
            if flock -n "$fd"; then held+=("$fd"); else exec {fd}>&-; fi
        done
        if ((${#held[@]} == cpus)); then
            exec {queue}>&-
            return 0
        fi
        for fd in "${held[@]}"; do exec {fd}>&-; done
        sleep 0.2
    done
}

run_task() {
    local index=$1 dir="$job/tasks/$1" fd rc start
    mkdir -p "$dir"
    # A cancel signals the whole group: the task says it ended by the signal (the poll
    # reads the cancel from the `cancelled` file).
    trap 'job_event "$job" "$id" "$index" signal 15; exit 143' TERM
    acquire_slots
    # Under the job's start lock, which LocalBackend::withdraw takes to look for a started
    # task before it marks the job cancelled: a job withdrawn while this task waited for
    # its CPUs never starts.
    exec {start}>>"$job/start.lock"
    flock "$start"
    [ -e "$job/cancelled" ] && exit 143
    date +%s.%N >"$dir/started.tmp" && mv "$dir/started.tmp" "$dir/started"
    exec {start}>&-
    job_event "$job" "$id" "$index" started
    (
        # The script must not inherit the slot locks, or a daemon it leaves behind would
        # keep the slots taken after the job ended.
        for fd in "${held[@]}"; do exec {fd}>&-; done
        enter_working_dir "$workdir" "$dir/reason" 2>"$dir/stderr" || exit @NOT_STARTED@
        # Found before env.sh applies the job's PATH, which need not hold it.
        runner=$(command -v bash) || {
            why="the script never ran: no bash in PATH $PATH"
            printf '%s\n' "$why" >"$dir/reason"
            printf 'batchbridge: %s\n' "$why" >"$dir/stderr"
            exit @NOT_STARTED@
        }
        # Positional parameters, not variables: env.sh may set any variable name.
        set -- "$job/script.sh" "$dir" "$index" "$runner"
        # What sourcing the environment says (a read-only variable, say) is the task's
        # stderr too, so that a job failing with @NOT_STARTED@ shows why.
        . "$job/env.sh" 2>"$2/stderr" || exit @NOT_STARTED@
        export BATCHBRIDGE_TASK_INDEX="$3"
        exec "$4" "$1" <"/dev/null" >"$2/stdout" 2>>"$2/stderr"
    )
    rc=$?
    printf '%s\n' "$rc" >"$dir/exit_code.tmp" && mv "$dir/exit_code.tmp" "$dir/exit_code"
    job_event "$job" "$id" "$index" exit "$rc"
}

running=0
for ((i = 0; i < tasks; i++)); do
    if ((running >= parallel)); then
        wait -n
        running=$((running - 1))
    fi
    run_task "$i" &
    running=$((running + 1))
done
wait
