# `sh -c "$FETCH_MANY" sh FETCH WORK ID TASK MODE A B [ID TASK MODE A B ...]`: for each job,
# the single fetch script FETCH (run as `sh -c FETCH sh WORK ID TASK MODE A B`) and then one
# frame on stdout: an `EXIT OUTLEN ERRLEN` line, then what FETCH printed on stdout and on
# stderr, byte for byte. The two streams go through files in a private directory, so that
# each frame's lengths are exact whatever the bytes.
fetch=$1 work=$2
shift 2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
while [ "$#" -ge 5 ]; do
    sh -c "$fetch" sh "$work" "$1" "$2" "$3" "$4" "$5" >"$tmp/o" 2>"$tmp/e"
    rc=$?
    printf '%s %s %s\n' "$rc" "$(($(wc -c <"$tmp/o")))" "$(($(wc -c <"$tmp/e")))"
    cat "$tmp/o" "$tmp/e"
    shift 5
done
