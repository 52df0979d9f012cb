# The tsp backend's remote half: `sh -c "$TSP_SH" sh ACTION WORK SLOTS ARGS...`, ACTION one
# of the functions below. Each work directory has a tsp server of its own, on the socket
# WORK/tsp.socket, which any tsp call starts (with SLOTS slots) when it is not running. tsp
# numbers its jobs from 0 again whenever its server starts, so a job's id is the server's
# start (its socket's time, 10 digits) followed by tsp's number (10 digits).
action=$1 work=$2 && export TS_SOCKET="$2/tsp.socket" TS_SLOTS="$3" && shift 3
# A server a call starts must not hold the lock of `submit` and `restart` (fd 9) for life.
tsp() { command tsp "$@" 9>&-; }
# `listing`: tsp's job list, then `epoch SECONDS`, when its server started.
listing() { tsp -l && printf 'epoch %s\n' "$(stat -c %Y "$TS_SOCKET")"; }
# `newest KEY`: the id of the newest job labelled KEY that the server holds, or nothing.
newest() {
    listing | awk -v label="[$1]" 'index($0, label) && $1 + 0 >= n { n = $1; found = 1 }
        $1 == "epoch" && found { printf "%s%010d\n", $2, n }'
}
# `submit KEY SLOTS DIR`: queue DIR/job.sh and print its id once tsp lists it. The client
# stays in the foreground (-f) of a process of ours, whose pid a cancel may need. A
# `restart` waits for the lock held here, so that it never drops a job being submitted.
submit() {
    exec 9>"$work/tsp.lock" && flock -s 9 && before=$(newest "$1")
    nohup tsp -f -n -L "$1" -N "$2" "$3/job.sh" </dev/null >/dev/null 2>&1 9>&- &
    echo $! >"$3/client.pid"
    for _ in $(seq 100); do
        id=$(newest "$1") && [ -n "$id" ] && [ "$id" != "$before" ] && echo "$id" && return
        sleep 0.1
    done
    echo "tsp did not list job $1 within 10 s" >&2 && return 1
}
# `cancel ID EPOCH NUMBER`: mark the job cancelled, then take it out of tsp. tsp never
# removes the first job of its list (`-r` says it cannot), which is a queued one when that
# waits for more slots than are free: ending its client drops it. tsp -k sends SIGTERM
# alone: what ignores it gets SIGKILL 5 s later, as from a batch scheduler.
cancel() {
    [ -d "$work/ids/$1" ] && : >"$work/ids/$1/cancel-requested"
    [ "$(stat -c %Y "$TS_SOCKET" 2>/dev/null)" = "$2" ] || return 0 # gone with its server
    case $(tsp -s "$3" 2>/dev/null) in
    queued) tsp -r "$3" 2>/dev/null || kill "$(cat "$work/ids/$1/client.pid")" ;;
    running) pid=$(tsp -p "$3") && tsp -k "$3"
        nohup sh -c 'sleep 5; kill -KILL "-$1"' sh "$pid" </dev/null >/dev/null 2>&1 & ;;
    esac
}
# `restart`: end the server once no job is queued, running or being submitted (its queue
# would be lost), in a later second than it started (else ids would repeat); the next tsp
# call starts another.
restart() {
    exec 9>"$work/tsp.lock" && flock 9
    while tsp -l | grep -qE '^[0-9]+ +(queued|running) '; do flock -u 9 && sleep 0.5 && flock 9; done
    while [ "$(stat -c %Y "$TS_SOCKET")" = "$(date +%s)" ]; do sleep 0.2; done
    tsp -K
}
"$action" "$@"
