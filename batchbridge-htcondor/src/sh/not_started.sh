# `sh -c "$NOT_STARTED" sh WORK CLUSTER/task-PROC...`: for every proc whose job directory
# holds task-PROC.reason (its script never ran), prints `CLUSTER PROC TEXT`, TEXT being the
# file's first line. `read` is a builtin: no process per file.
work=$1
shift
for proc in "$@"; do
    f=$work/ids/${proc%%/*}/${proc#*/}.reason
    [ -f "$f" ] || continue
    why=
    read -r why <"$f"
    index=${proc#*/task-}
    printf '%s %s %s\n' "${proc%%/*}" "$index" "$why"
done
