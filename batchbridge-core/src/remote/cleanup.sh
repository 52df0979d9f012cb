# `sh -c "$CLEANUP" sh WORK KEY`: removes the job directory WORK/jobs/KEY, the WORK/ids/ID
# link to it and the job's event files WORK/events/ID.*. The link and events go first, so
# that a removal cut short leaves the directory and its job_id for the next one to find.
# KEY is a validated job key, never "." or "..".
dir=$1/jobs/$2
[ -d "$dir" ] || exit 0
if [ -s "$dir/job_id" ]; then
    read -r id <"$dir/job_id"
    case $id in
    '' | *[!0-9]*) ;;
    *) rm -f -- "$1/ids/$id" "$1/events/$id".* || exit 1 ;;
    esac
fi
rm -rf -- "$dir"
