# `sh -c "$CANCEL" sh CLUSTER REASON`: condor_rm, idempotent, with a REASON that tells this
# cancel from a condor_rm by hand (batchbridge_htcondor::state::CANCEL_REASON). condor_rm says
# the same thing for a cluster that is gone and for one it may not touch, so on a refusal the
# procs still in the queue and not already removed are printed as `OWNER JOBSTATUS` lines
# (none: nothing left to cancel). Exits 1 with the scheduler's message when condor_rm or condor_q fails
# otherwise.
out=$(condor_rm -reason "$2" "$1" 2>&1) && exit 0
case $out in
*"Couldn't find/remove all jobs"*) ;;
*) printf '%s\n' "$out" >&2; exit 1 ;;
esac
condor_q -allusers "$1" -constraint 'JobStatus =!= 3' -af Owner JobStatus
