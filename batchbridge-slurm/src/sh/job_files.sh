# `sh -c "$JOB_FILES" sh WORK ID...`: what each job's directory says. For every id submitted
# through WORK prints `ID tasks COUNT CANCELLED(0|1)`, then `ID task INDEX exit|signal N` for
# every task whose end the batch script recorded.
work=$1
shift
for id in "$@"; do
    d=$work/ids/$id
    [ -d "$d" ] || continue
    cancelled=0
    [ -e "$d/cancel-requested" ] && cancelled=1
    printf '%s tasks %s %s\n' "$id" "$(cat "$d/tasks" 2>/dev/null || echo 1)" "$cancelled"
    for f in "$d"/task-*.exit; do
        [ -f "$f" ] || continue
        index=${f##*/task-}
        printf '%s task %s %s\n' "$id" "${index%.exit}" "$(cat "$f")"
    done
done
