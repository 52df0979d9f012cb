# `job_event JOB_DIR ID TASK WHAT [N]`: records that task TASK of job ID (the id the backend's
# submit returned) started (`started`) or ended (`exit N`, `signal N`), as an empty file
# WORK/events/ID.TASK.WHAT[.N] beside WORK/jobs/ (JOB_DIR is WORK/jobs/KEY). The name is the
# whole record: creating an empty file is atomic on every file system, NFS included, so a
# reader never sees half of one and never opens one. Writing it never fails the job: an id
# that is not a number or an events directory that is not there records nothing. POSIX sh,
# no process started; positional parameters, not variables, so that it sets none.
job_event() {
    case $2 in '' | *[!0-9]*) return 0 ;; esac
    set -- "${1%/jobs/*}/events/$2.$3.$4${5:+.$5}"
    true 2>/dev/null >"$1"
    return 0
}
