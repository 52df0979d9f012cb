#!/bin/sh
# batchbridge's follower of HTCondor's user job event log:
# `follow_events.sh WORK_DIR LOG_NAME HEARTBEAT_SECONDS`. Prints the lines the schedd and the
# shadows append to WORK_DIR/LOG_NAME from now on: nothing older, as the scheduler poll
# covers what a restart missed, and replayed holds could flip a job that was released since.
# It asks the scheduler nothing whatever the job count: tail waits on the file (inotify, or
# one stat a second).
#
# An empty line every HEARTBEAT_SECONDS keeps it bounded in time: once batchbridge closes the
# channel, that write fails and tail is killed; once tail is gone (killed on this node), the
# loop ends and the channel closes.
mkdir -p -- "$1" || exit
log=$1/$2
: >>"$log" || exit
(
    # A write to the closed channel fails instead of killing the loop before it kills tail.
    trap '' PIPE
    while sleep "$3"; do
        kill -0 "$$" 2>/dev/null || exit 0
        printf '\n' || {
            kill "$$" 2>/dev/null
            exit 0
        }
    done
) </dev/null &
# $$ stays this process's id: the loop above watches tail under it.
exec tail -F -n 0 -- "$log"
