#!/bin/bash
# How late HTCondor itself writes a job's end to its user job event log, with no batchbridge
# involved: `user_log_delay.sh [N] [P] [DIR]` submits N single-job clusters from P parallel
# `condor_submit` loops (a burst like the operator's), each job printing its end time
# (`date +%s.%N`), while `tail -F` stamps every log line as it arrives. Per job, delay =
# arrival of its `005` (terminated) event - the time it printed; printed split by whether
# the job ended before the last submit (during the burst) or after. Run it as a pool user on
# the submit node, in a DIR the execution points share (default ~/user-log-delay, removed
# after). The test bed: `chroot /var/lib/batchbridge-testbed/htcondor/rootfs runuser -u batch
# -- bash user_log_delay.sh 300 8`.
set -eu
n=${1:-300} p=${2:-8} dir=${3:-$HOME/user-log-delay}
mkdir -p "$dir" && cd "$dir"
rm -f events.log out.* arrivals
: >events.log
cat >job.sub <<SUB
executable = /bin/sh
arguments = "-c 'date +%s.%N'"
output = $dir/out.\$(Cluster)
error = /dev/null
log = $dir/events.log
should_transfer_files = NO
queue
SUB
tail -F -n +1 events.log 2>/dev/null | while IFS= read -r line; do
    printf '%s %s\n' "$(date +%s.%N)" "$line"
done >arrivals &
stamper=$!
start=$(date +%s.%N)
pids=()
for ((i = 0; i < p; i++)); do
    (for ((j = 0; j < n / p; j++)); do condor_submit -terse job.sub >/dev/null; done) &
    pids+=($!)
done
wait "${pids[@]}"
awk -v a="$start" -v b="$(date +%s.%N)" -v n="$n" 'BEGIN { printf "%d submits in %.1f s\n", n, b - a }'
while condor_q -af ClusterId | grep -q .; do sleep 1; done
sleep 3
kill "$stamper"
pkill -u "$(id -u)" -f "tail -F -n \+1 events.log" || true
for f in out.*; do printf '%s %s\n' "${f#out.}" "$(cat "$f")"; done >ends
awk '
    FNR == NR { end[$1] = $2; next }
    $2 == "000" { c = $3; sub(/^\(/, "", c); sub(/\..*/, "", c); last_submit = $1 }
    $2 == "005" { c = $3; sub(/^\(/, "", c); sub(/\..*/, "", c); seen[c] = $1 }
    END {
        for (c in seen) if (c in end) {
            lane = end[c] <= last_submit ? "during the burst" : "after the burst"
            printf "%s\t%.3f\n", lane, seen[c] - end[c]
        }
    }' ends arrivals | sort -t "$(printf '\t')" -k1,1 -k2,2n | awk -F '\t' '
    { d[$1, ++n[$1]] = $2 }
    END {
        for (lane in n) {
            k = n[lane]
            p50 = d[lane, int((k + 1) * 0.50) > 0 ? int((k + 1) * 0.50) : 1]
            i99 = int(k * 0.99) + 1; if (i99 > k) i99 = k
            printf "%s: %d jobs, delay p50 %.2f s, p99 %.2f s, max %.2f s\n", lane, k, p50, d[lane, i99], d[lane, k]
        }
    }'
cd / && rm -rf "$dir"
