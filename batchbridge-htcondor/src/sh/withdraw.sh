# `sh -c "$WITHDRAW" sh CLUSTER HOLD_REASON CANCEL_REASON`: removes cluster CLUSTER (every
# proc of it) only if none of its procs started, and prints what it found: `withdrawn`,
# `started` or `ended`. Its idle procs are held first (with HOLD_REASON), which keeps the
# schedd from starting them while condor_q lists the procs' JobStatus: all held, the
# cluster is removed with CANCEL_REASON, as a cancel is; one running, transferring or
# suspended (it started), the procs held here are released and the cluster left; none
# left in the queue, it had ended. CLUSTER is a number (the backend checked it).
condor_hold -reason "$2" -constraint "ClusterId == $1 && JobStatus == 1" >/dev/null 2>&1
if ! states=$(condor_q "$1" -af JobStatus 2>&1); then
    printf '%s\n' "$states" >&2
    exit 1
fi
waiting=0 active=0
for state in $states; do
    case $state in
    1 | 5) waiting=1 ;;
    2 | 6 | 7) active=1 ;;
    esac
done
if [ "$active" = 1 ]; then
    condor_release -constraint "ClusterId == $1 && JobStatus == 5 && HoldReason == \"$2\"" >/dev/null 2>&1
    echo started
elif [ "$waiting" = 1 ]; then
    out=$(condor_rm -reason "$3" "$1" 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
    echo withdrawn
else
    echo ended
fi
