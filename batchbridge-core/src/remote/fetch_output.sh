# `sh -c "$FETCH" sh WORK ID TASK tail N` or `... range OFFSET LEN`: a window of the task's
# stdout on stdout and of its stderr on stderr, each after a `SIZE OFFSET` line. Streams the
# bytes with dd; nothing is read whole. Exits @NO_SUCH_JOB@ when WORK has no job ID, and
# @NO_SUCH_TASK@ after printing the job's task count when it has no task TASK (placeholders of
# batchbridge_core::remote's exit codes, filled in by render_script).
d=$1/ids/$2 task=$3 mode=$4 a=$5 b=${6:-0}
[ -d "$d" ] || exit @NO_SUCH_JOB@
if [ -r "$d/tasks" ]; then
    read -r tasks <"$d/tasks"
    [ "$task" -lt "$tasks" ] || { printf '%s\n' "$tasks"; exit @NO_SUCH_TASK@; }
fi
window() {
    size=$(stat -c %s "$1" 2>/dev/null) || size=0
    if [ "$mode" = tail ]; then
        len=$a
        [ "$len" -gt "$size" ] && len=$size
        offset=$((size - len))
    else
        offset=$a len=$b
        [ "$offset" -gt "$size" ] && offset=$size
    fi
    printf '%s %s\n' "$size" "$offset"
    [ "$len" -gt 0 ] && [ "$offset" -lt "$size" ] &&
        dd if="$1" bs=65536 skip="$offset" count="$len" iflag=skip_bytes,count_bytes 2>/dev/null
    return 0
}
window "$d/task-$task.stdout"
window "$d/task-$task.stderr" >&2
