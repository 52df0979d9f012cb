# `sh -c "$FIND" sh VARIABLE KEY`: the ids of this user's jobs, history included, whose
# qstat record mentions VARIABLE=KEY, one per line; the caller keeps only those whose
# variable is exactly KEY. The filtering happens here because the whole history of a busy
# server is megabytes (4,000 jobs: 6.7 MB), more than a command's output may be, while
# what matches is a line or two. The owner check is qselect's, not a field of the record,
# so that no other user's job, whatever its variables say, is taken for ours.
records=$(env TZ=UTC0 qstat -x -f -F dsv) || exit
candidates=$(printf '%s\n' "$records" | awk -v want="$1=$2" 'index($0, want) {
    id = $0
    sub(/^Job Id: /, "", id)
    sub(/\|.*/, "", id)
    print id
}')
[ -n "$candidates" ] || exit 0
ours=$(qselect -x -u "$(id -un)") || exit
printf '%s\n' "$ours" | grep -Fx -e "$candidates" || true
