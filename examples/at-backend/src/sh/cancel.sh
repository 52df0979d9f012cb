# `sh -c "$CANCEL" sh WORK ID`: cancels at job ID. First a mark in its directory (a wrapper
# starting now then never runs the script), then atrm (a queued job never starts; at forgets
# a running one but does not stop it), then SIGTERM to a running job's wrapper, which
# records `signal 15` and stops the script's process group (SIGTERM, and SIGKILL to what is
# left of it 10 s later). An unknown or finished job is not an error; any other atrm
# failure exits 1 with its message.
d=$1/ids/$2
[ -d "$d" ] && : >"$d/cancel-requested"
if ! said=$(atrm "$2" 2>&1); then
    case $said in
    *"Cannot find jobid"*) ;;
    *) printf '%s\n' "$said" >&2; exit 1 ;;
    esac
fi
if [ -d "$d" ] && [ -s "$d/wrapper.pid" ]; then
    read -r pid <"$d/wrapper.pid"
    kill -TERM "$pid" 2>/dev/null
fi
exit 0
