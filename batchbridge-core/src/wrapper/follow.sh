# `sh -c "$FOLLOW" sh EVENTS TICK BEAT SWEEP DAYS`: follows the job events in the directory
# EVENTS (absolute) that job wrappers write (job_event.sh): lists it once every TICK seconds
# and prints each event name it has not printed yet (on start, every name already there), one
# a line, starts before ends, then `.` every BEAT lists, a heartbeat whose write ends the follower once its
# reader is gone. Every SWEEP lists (and on start) it removes the files older than DAYS days:
# events of jobs nobody cleaned up, and anything else a job left there.
#
# One directory listing per tick whatever the job count: the glob lists EVENTS in this shell,
# by its absolute path, so that an NFS client revalidates the directory on each open
# (close-to-open); nothing is opened, read or stat'ed but in the sweep. The names already
# printed live in awk's memory, replaced each tick by the names listed, so it holds what the
# directory holds. Names that are not events are skipped; no scheduler is asked anything.
# Processes: this shell, the listing loop's subshell, awk, and a `sleep` per tick.
events=$1 tick=$2 beat=$3 sweep=$4 days=$5
# A directory that is not there ends the run at once, rather than listing nothing forever.
[ -d "$events" ] || { printf 'no events directory %s\n' "$events" >&2; exit 1; }
# mawk reads a pipe in whole blocks, holding events back until a block fills, unless asked
# to read line by line; other awks do.
line_by_line=
case $(awk -W version 2>&1 </dev/null) in *mawk*) line_by_line='-W interactive' ;; esac
ticks=0
while :; do
    if [ "$((ticks % sweep))" -eq 0 ]; then
        find "$events/." ! -name . -prune -type f -mtime "+$days" -exec rm -f {} + 2>/dev/null
    fi
    ticks=$((ticks + 1))
    # Each name is printed as EVENTS/NAME/ and a listing ends with a line `/`: a name holds
    # no `/`, so a line of a name that holds a line break never ends with one, and a line
    # counts only after a line that did. A job cannot forge an event or a listing's end
    # with such a name.
    printf '%s/\n' "$events"/* || exit 0
    echo / || exit 0
    sleep "$tick" 2>/dev/null || sleep 1
done | prefix=$events/ awk $line_by_line -v beat="$beat" '
BEGIN { prefix = ENVIRON["prefix"]; boundary = 1 }
boundary && $0 == "/" {
    # Starts before ends, when one listing finds both of a task.
    for (name in fresh) if (name ~ /\.started(\.t[0-9]+)?$/) print name
    for (name in fresh) if (name !~ /\.started(\.t[0-9]+)?$/) print name
    delete fresh
    delete printed
    for (name in listed) printed[name] = 1
    delete listed
    if (lists++ % beat == 0) print "."
    fflush()
    next
}
{
    whole = boundary
    boundary = $0 ~ /\/$/
    if (!whole || !boundary || index($0, prefix) != 1) next
    name = substr($0, length(prefix) + 1, length($0) - length(prefix) - 1)
    if (length(name) > 64 || name !~ /^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(started|(exit|signal)\.(0|[1-9][0-9]*))(\.t(0|[1-9][0-9]*))?$/) next
    listed[name] = 1
    if (!(name in printed)) fresh[name] = 1
}'
