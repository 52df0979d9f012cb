# `sh -c "$WITHDRAW" sh WORK ID`: deletes job ID (the array `ID[]` when PBS knows no job
# `ID`) only if no part of it started, and prints what it found: `withdrawn`, `started` or
# `ended`. A qhold first keeps a queued job from starting; then its job_state says: held,
# it is deleted (after the cancel mark cancel.sh writes too); running, exiting, begun (an
# array with a started subjob) or suspended, the hold is released and the job left; gone
# or finished, it had ended. Anything else (a hold that did not take) fails, to be tried
# again.
job=
for id in "$2" "$2[]"; do
    if out=$(qstat -f "$id" 2>&1); then
        job=$id
        break
    fi
    case $out in
    *"Unknown Job Id"*) continue ;;
    *"Job has finished"*) echo ended && exit 0 ;;
    esac
    printf '%s\n' "$out" >&2
    exit 1
done
[ -n "$job" ] || { echo ended && exit 0; }
held=0
qhold "$job" >/dev/null 2>&1 && held=1
# A qstat that fails now (the server not answering) fails the withdraw; a job PBS has
# since finished reads as ended.
if ! out=$(qstat -f "$job" 2>&1); then
    case $out in
    *"Job has finished"* | *"Unknown Job Id"*) echo ended && exit 0 ;;
    esac
    [ "$held" = 1 ] && qrls "$job" >/dev/null 2>&1
    printf '%s\n' "$out" >&2
    exit 1
fi
state=$(printf '%s\n' "$out" | sed -n 's/^ *job_state = //p')
case $state in
H)
    [ -d "$1/ids/$2" ] && : >"$1/ids/$2/cancel-requested"
    out=$(qdel "$job" 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
    echo withdrawn
    ;;
R | E | B | S | U)
    [ "$held" = 1 ] && qrls "$job" >/dev/null 2>&1
    echo started
    ;;
'' | F | X) echo ended ;;
*)
    [ "$held" = 1 ] && qrls "$job" >/dev/null 2>&1
    printf 'job %s is in state %s after qhold\n' "$job" "$state" >&2
    exit 1
    ;;
esac
