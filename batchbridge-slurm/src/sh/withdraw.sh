# `sh -c "$WITHDRAW" sh WORK ID`: cancels job ID (every task of an array) only if none of
# it started, and prints what it found: `withdrawn`, `started` or `ended`.
# - A job that is not an array and waits: `scancel --state=PENDING`, which slurmctld applies
#   only to a job still pending when it gets the request; squeue then tells whether it was
#   cancelled or had started. No hold: a held job's eligible time is lost, and sacct's
#   time windows (`sacct -S`) no longer list it.
# - An array: a hold first keeps every pending task from starting while squeue lists the
#   tasks' states; all pending, it is cancelled; a task started, the hold is released and
#   the array left running.
# A job cancelled here is marked so in its directory, as cancel.sh does. A squeue that
# fails (slurmctld not answering) fails the withdraw: nothing is said of a job not seen.
#
# `tasks WORK ID`: each task's `ARRAY_INDEX STATE`, nothing for a job SLURM does not know;
# fails, saying why on stderr, when squeue does. Called in `$(…)`, so its caller checks.
tasks() {
    if ! out=$(squeue -h -r -t all -j "$2" -o '%K %T' 2>&1); then
        case $out in
        *"Invalid job id"*) return 0 ;;
        esac
        printf '%s\n' "$out" >&2
        return 1
    fi
    printf '%s\n' "$out"
}
withdrawn() {
    [ -d "$1/ids/$2" ] && : >"$1/ids/$2/cancel-requested"
    echo withdrawn
    exit 0
}
before=$(tasks "$@") || exit
case $before in
'') echo ended && exit 0 ;;
'N/A PENDING')
    scancel --state=PENDING "$2" || exit
    after=$(tasks "$@") || exit
    case $after in
    'N/A CANCELLED') withdrawn "$@" ;;
    '') echo ended ;;
    *) echo started ;;
    esac
    exit 0
    ;;
'N/A '*) ;;
*) scontrol hold "$2" 2>/dev/null ;;
esac
held=$(tasks "$@") || exit
pending=0 other=0 active=0
for state in $(printf '%s\n' "$held" | cut -d' ' -f2); do
    case $state in
    PENDING) pending=1 ;;
    RUNNING | SUSPENDED | COMPLETING | CONFIGURING | STOPPED | SIGNALING | RESIZING | STAGE_OUT | REQUEUE*)
        other=1 active=1
        ;;
    *) other=1 ;;
    esac
done
if [ "$pending" = 1 ] && [ "$other" = 0 ]; then
    scancel --state=PENDING "$2" || exit
    withdrawn "$@"
elif [ "$pending" = 1 ] || [ "$active" = 1 ]; then
    [ "$pending" = 1 ] && scontrol release "$2" 2>/dev/null
    echo started
else
    echo ended
fi
