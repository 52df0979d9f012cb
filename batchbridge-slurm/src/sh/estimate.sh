# sbatch --test-only with the options of the real submit ("$@"); the batch script arrives on
# stdin. Times in seconds since the epoch, as squeue's. Then the login node's clock: the
# "now" the estimate is compared with (SLURM needs its hosts' clocks in step for munge).
SLURM_TIME_FORMAT=%s sbatch --test-only "$@"
rc=$?
date +%s
exit "$rc"
