# `sh -c "$JOB_FILES" sh WORK ID...`: what each job's directory says. For every id submitted
# through WORK prints `ID tasks COUNT CANCELLED(0|1)` (COUNT from the `tasks` file, 1 without
# one), then `ID task INDEX exit|signal N` for every task whose end its wrapper recorded, and
# `ID why INDEX TEXT` for every task whose script never ran (the first line of its
# task-INDEX.reason).
work=$1
shift
for id in "$@"; do
    d=$work/ids/$id
    [ -d "$d" ] || continue
    cancelled=0
    [ -e "$d/cancel-requested" ] && cancelled=1
    # `read` is a builtin: no process per file, which matters at a thousand jobs a cycle.
    tasks=1
    [ -f "$d/tasks" ] && read -r tasks <"$d/tasks"
    printf '%s tasks %s %s\n' "$id" "$tasks" "$cancelled"
    for f in "$d"/task-*.exit; do
        [ -f "$f" ] || continue
        index=${f##*/task-}
        end=
        read -r end <"$f"
        printf '%s task %s %s\n' "$id" "${index%.exit}" "$end"
    done
    for f in "$d"/task-*.reason; do
        [ -f "$f" ] || continue
        index=${f##*/task-}
        why=
        read -r why <"$f"
        printf '%s why %s %s\n' "$id" "${index%.reason}" "$why"
    done
done
