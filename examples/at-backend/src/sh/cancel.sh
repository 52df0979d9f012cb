# `sh -c "$CANCEL" sh WORK ID`: cancels at job ID. First a mark in its directory (a wrapper
# starting now then never runs the script), then SIGTERM to a running job's wrapper, which
# records `signal 15` and stops the script's process group (SIGTERM, and SIGKILL to what is
# left of it 10 s later), then atrm (a queued job never starts; at forgets a running one but
# does not stop it). The wrapper is given up to 5 s to record its end before atrm: a status
# read between atrm and that record would find the job neither in at nor ended, and take it
# for one removed before it started. An unknown or finished job is not an error; any other
# atrm failure exits 1 with its message.
d=$1/ids/$2
[ -d "$d" ] && : >"$d/cancel-requested"
if [ -d "$d" ] && [ -s "$d/wrapper.pid" ]; then
    read -r pid <"$d/wrapper.pid"
    if kill -TERM "$pid" 2>/dev/null; then
        tries=0
        while [ -e "$d/wrapper.pid" ] && [ "$tries" -lt 50 ]; do
            sleep 0.1
            tries=$((tries + 1))
        done
    fi
fi
if ! said=$(atrm "$2" 2>&1); then
    case $said in
    *"Cannot find jobid"*) ;;
    *) printf '%s\n' "$said" >&2; exit 1 ;;
    esac
fi
exit 0
