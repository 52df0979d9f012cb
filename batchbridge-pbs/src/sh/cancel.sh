# `sh -c "$CANCEL" sh WORK ID`: a mark in the job's directory first (so that a job PBS has
# forgotten still reads as cancelled, and a status can tell batchbridge's cancel from a
# `qdel` outside it), then qdel, of the array `ID[]` when PBS knows no job `ID`. A job that
# is finished or unknown is not an error (qdel exits 35 or 153 for those); any other
# failure exits with qdel's code and message.
[ -d "$1/ids/$2" ] && : >"$1/ids/$2/cancel-requested"
for id in "$2" "$2[]"; do
    out=$(qdel "$id" 2>&1) && exit 0
    rc=$?
    case $out in
    *"Unknown Job Id"*) continue ;;
    *"Job has finished"*) exit 0 ;;
    esac
    printf '%s\n' "$out" >&2
    exit "$rc"
done
exit 0
