# `sh -c "$QUEUE" sh DIR QUEUE`: queues DIR/job.sh in at's queue QUEUE (a letter; b is the
# batch queue) to start now, from DIR: at records the directory and starts the job there.
# Prints the job's number alone: at says `job N at DATE` on stderr, after a warning that the
# job runs with /bin/sh. Passes on what at says when it refuses.
cd "$1" || exit
said=$(at -q "$2" -f job.sh now 2>&1) || { printf '%s\n' "$said" >&2; exit 1; }
id=${said##*job }
printf '%s\n' "${id%% *}"
