# `sh -c "$WITHDRAW" sh WORK ID`: cancels job ID (every task of an array) only if none of
# it started, and prints what it found: `withdrawn`, `started` or `ended`. A hold first
# keeps every pending task from starting while squeue lists the tasks' states: all
# pending, the job is cancelled (and marked so in its directory, as cancel.sh does); a task
# started, the hold is released and the job left running; nothing pending or active, it
# had ended.
scontrol hold "$2" 2>/dev/null
if ! states=$(squeue -h -r -j "$2" -o %T 2>&1); then
    case $states in
    *"Invalid job id"*) echo ended && exit 0 ;;
    esac
    printf '%s\n' "$states" >&2
    exit 1
fi
pending=0 other=0 active=0
for state in $states; do
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
    [ -d "$1/ids/$2" ] && : >"$1/ids/$2/cancel-requested"
    echo withdrawn
elif [ "$pending" = 1 ] || [ "$active" = 1 ]; then
    [ "$pending" = 1 ] && scontrol release "$2" 2>/dev/null
    echo started
else
    echo ended
fi
