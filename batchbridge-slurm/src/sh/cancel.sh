# `sh -c "$CANCEL" sh WORK ID`: scancel, then a mark in the job's directory so that a job
# SLURM has forgotten still reads as cancelled. scancel's own exit code is kept (210 is
# permission denied); an unknown or finished job is not an error.
scancel "$2" || exit
[ -d "$1/ids/$2" ] && : >"$1/ids/$2/cancel-requested"
exit 0
