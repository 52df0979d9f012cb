# `sh -c "$FIND" sh DIR`: the number of the user's at job that starts in DIR, if at still
# holds one. at keeps the directory a job was queued from in a `cd` line of the job
# (`at -c`), every character but letters, digits and `/` escaped with a backslash.
atq | while read -r id _; do
    cwd=$(at -c "$id" 2>/dev/null | sed -n 's/^cd \(.*\) || {$/\1/p' | sed 's/\\\(.\)/\1/g')
    if [ "$cwd" = "$1" ]; then
        printf '%s\n' "$id"
        break
    fi
done
