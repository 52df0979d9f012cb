task=0
# The submit records the id once tsp lists the job, which tsp may start first.
for _ in $(seq 100); do [ -s "$dir/job_id" ] && break; sleep 0.1; done
job=$(cat "$dir/job_id")
# A cancel that found the job queued, as it started: nothing of it runs.
[ -e "$dir/cancel-requested" ] && exit 143
