# `job_event JOB_DIR ID TASK WHAT [N]`: records that task TASK of job ID (the id the backend's
# submit returned) started (`started`) or ended (`exit N`, `signal N`), as an empty file
# WORK/events/ID.TASK.WHAT[.N].tSECONDS beside WORK/jobs/ (JOB_DIR is WORK/jobs/KEY), with the
# Unix time it happened, so that an event read late (after an outage of the follower) still
# dates the job's start or end rightly. The name is the whole record: creating an empty file
# is atomic on every file system, NFS included, so a reader never sees half of one and never
# opens one. Writing it never fails the job: an id that is not a number or an events
# directory that is not there records nothing, and a time `date` cannot tell is left out.
# POSIX sh; no process started under bash (EPOCHSECONDS), one `date` under other shells;
# positional parameters, not variables, so that it sets none.
job_event() {
    case $2 in '' | *[!0-9]*) return 0 ;; esac
    set -- "${1%/jobs/*}/events/$2.$3.$4${5:+.$5}" "${EPOCHSECONDS:-$(date +%s 2>/dev/null)}"
    case $2 in '' | *[!0-9]*) set -- "$1" ;; *) set -- "$1.t$2" ;; esac
    true 2>/dev/null >"$1"
    return 0
}
