# `sh -c "$CLEANUP" sh WORK KEY STAGING`: removes the job directory WORK/jobs/KEY, the
# WORK/ids/ID link to it, the job's event files WORK/events/ID.* and what it staged: its
# staging directory WORK/staged/KEY, or the inputs listed in its staged_inputs, staged into a
# working directory of the user's own (removed by STAGING, the staging script, which refuses
# paths leaving that directory). The link and events go first, so that a removal cut short
# leaves the directory and its job_id for the next one to find.
# KEY is a validated job key, never "." or "..".
dir=$1/jobs/$2
rm -rf -- "$1/staged/$2" || exit 1
[ -d "$dir" ] || exit 0
if [ -s "$dir/job_id" ]; then
    read -r id <"$dir/job_id"
    case $id in
    '' | *[!0-9]*) ;;
    *) rm -f -- "$1/ids/$id" "$1/events/$id".* || exit 1 ;;
    esac
fi
if [ -s "$dir/staged_inputs" ] && [ -s "$dir/working_dir" ]; then
    staging=$3 work=$1
    read -r wd <"$dir/working_dir"
    set --
    while IFS= read -r f || [ -n "$f" ]; do set -- "$@" "$f"; done <"$dir/staged_inputs"
    sh -c "$staging" sh remove "$wd" "$@" || exit 1
fi
rm -rf -- "$dir"
