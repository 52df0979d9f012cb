#!/usr/bin/env bash
# Runs every test of the workspace, as `cargo test --workspace --locked` would (unit tests,
# integration tests, doctests), but the test binaries in concurrent lanes: most of their time
# is spent waiting on a scheduler, one after another they took 50 minutes.
#
# A lane holds the binaries that mostly talk to one component and runs them one after
# another, so that component never sees more than one test binary at a time, as when cargo
# ran them all in a row. The binaries that take a component away, fill a whole cluster or
# time an idle one (EXCLUSIVE below) run alone, one after another, once every lane is done.
# Each binary runs from its package's directory with CARGO_MANIFEST_DIR and CARGO set, as
# cargo runs it; its output goes to a file of its own, printed whole when it ends, so that
# concurrent binaries never interleave. Every lane runs to its end whatever fails; the exit
# status is 1 when any binary failed, and the last lines name them.
#
# A new integration test binary must be put in a lane or in EXCLUSIVE: the script refuses
# to run with one that is in neither. Unit tests (lib and bin targets) and doctests need no
# test bed and run in the `local` lane.
#
# usage: tests/lanes.sh
# BATCHBRIDGE_SKIP_EXCLUSIVE=1 skips EXCLUSIVE: for trial runs on a test bed that others use
# at the same time (those binaries stop daemons under their tests). Never in CI: it is not a
# full run, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each entry: PACKAGE_DIR/TEST_TARGET, then arguments for the test binary. The SLURM crate's
# binaries run each test on both clusters, named slurm_22_05::… and slurm_24_11::…: each
# cluster's lane runs its half. Balanced on the per-binary times of a sequential run
# (seconds, ci4, a shared 2-core machine).

# The API server and SLURM 22.05 (the host's cluster behind the test bed's sshd,
# 127.0.0.1:2222): every binary that runs an operator, and the CLI's; the operator's and
# the CLI's cluster is this one, and tests here take its whole node (partition `single`).
# A trial with the API server in three lanes at once saw its answers take over 32 s.
# About 1320 s.
lane_kube_slurm_2205=(
    "batchbridge-slurm/real_slurm --skip slurm_24_11::"
    "batchbridge-slurm/conformance_slurm --skip slurm_24_11::"
    "batchbridge-slurm/capped_drain --skip slurm_24_11::"
    "batchbridge-slurm/dependencies --skip slurm_24_11::"
    "batchbridge-slurm/events_slurm --skip slurm_24_11::"
    "batchbridge-slurm/hostile_input --skip slurm_24_11::"
    "batchbridge-slurm/refusals --skip slurm_24_11::"
    batchbridge-operator/e2e_slurm       # 287
    batchbridge-cli/cli                  # 265
    batchbridge-operator/certificates    # 121
    batchbridge-operator/kerberos        # 67
    batchbridge-operator/array_output    # 62, also HTCondor
    batchbridge-operator/job_files       # 39
    batchbridge-operator/leader_election # 32
    batchbridge-operator/gating          # 31
    batchbridge-operator/cluster_lifecycle
    batchbridge-operator/tenant_isolation
    batchbridge-operator/dependencies
    batchbridge-operator/staging
    batchbridge-operator/deploy_manifests
    batchbridge-operator/hostile_input
    batchbridge-operator/image_runtime
    batchbridge-operator/jump_hosts
    batchbridge-operator/e2e_pbs
    batchbridge-operator/crds_apiserver
    batchbridge-operator/events
    examples/at-backend/operator
    batchbridge-cli/kerberos
)

# SLURM 24.11 (its own root filesystem and sshd, 127.0.0.1:2225). About 350 s.
lane_slurm_2411=(
    "batchbridge-slurm/real_slurm slurm_24_11::"
    "batchbridge-slurm/conformance_slurm slurm_24_11::"
    "batchbridge-slurm/capped_drain slurm_24_11::"
    "batchbridge-slurm/dependencies slurm_24_11::"
    "batchbridge-slurm/events_slurm slurm_24_11::"
    "batchbridge-slurm/hostile_input slurm_24_11::"
    "batchbridge-slurm/refusals slurm_24_11::"
    batchbridge-slurm/staging_large      # 26
)

# HTCondor's personal pool. About 150 s.
lane_htcondor=(
    batchbridge-htcondor/conformance_htcondor
    batchbridge-htcondor/capped_drain
    batchbridge-htcondor/events
    batchbridge-htcondor/hostile_input
    batchbridge-htcondor/real_pool
    batchbridge-htcondor/staging_large
    batchbridge-htcondor/events_flood
)

# OpenPBS. About 210 s.
lane_pbs=(
    batchbridge-pbs/conformance_pbs
    batchbridge-pbs/capped_drain
    batchbridge-pbs/staging_large
    batchbridge-pbs/real_pbs
    batchbridge-pbs/events_pbs
    batchbridge-pbs/dependencies
    batchbridge-pbs/hostile_input
    batchbridge-pbs/refusals
)

# No scheduler of the bed: the local backend, the logins (sshd, jump hosts, certificates,
# Kerberos), at and task-spooler (the example backends), packaging; then the unit tests and
# doctests (added below). About 310 s.
lane_local=(
    batchbridge-cli/distribution         # 120, mostly cargo install's build
    batchbridge-core/ssh_kerberos        # 80
    batchbridge-core/conformance_local
    batchbridge-core/follow_local
    batchbridge-core/events_local
    batchbridge-core/ssh_shell
    batchbridge-core/hostile_local
    batchbridge-core/tracker_local
    batchbridge-core/local_backend
    batchbridge-core/ssh_jump_hosts
    batchbridge-core/ssh_certificate
    batchbridge-core/local_shell
    batchbridge-core/estimate_local      # local backends of its own: nothing shared to fill
    examples/at-backend/conformance
    examples/at-backend/events_at
    examples/at-backend/real_at
    examples/tsp-backend/conformance
    batchbridge-operator/dashboard
    batchbridge-operator/dependency_bench # a benchmark: ignored unless asked for
    batchbridge-operator/scale_bench
    tests/support/import_cycles
)

# Alone, one after another, after the lanes: each takes a component away from, or needs an
# idle cluster under, whatever else would run beside it.
EXCLUSIVE=(
    batchbridge-operator/faults          # stops sshd (every SSH login), restarts slurmctld, stops slurmdbd
    batchbridge-operator/placement       # fills every CPU of both SLURM clusters with a blocker
    # 200 jobs through a cap of 10 (SLURM 24.11's partition `capped`): whether the cap is met
    # depends on submits outpacing job ends; a trial beside the lanes failed all three tests.
    batchbridge-operator/submit_limits
    batchbridge-slurm/node_full          # fills a SLURM node's every CPU
    batchbridge-slurm/accounting_down    # stops slurmdbd: sacct fails for everyone meanwhile
    batchbridge-htcondor/schedd_down     # stops the schedd
    batchbridge-pbs/server_down          # stops pbs_server
    batchbridge-slurm/estimate           # estimates starts: fills the cluster, idle otherwise
    batchbridge-htcondor/estimate        # the same on the pool
    batchbridge-pbs/estimate             # the same on the node
)

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cargo=$(command -v cargo)

# Every test executable cargo builds, by PACKAGE_DIR/TARGET, with its package's directory.
declare -A executable package_dir
units=()
while IFS=$'\t' read -r exe manifest target kind; do
    dir=$(dirname "$manifest")
    key=${dir#"$PWD/"}/$target
    executable[$key]=$exe
    package_dir[$key]=$dir
    [[ $kind == test ]] || units+=("$key")
done < <(cargo test --workspace --locked --no-run --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
        | [.executable, .manifest_path, .target.name, .target.kind[0]] | @tsv')
lane_local+=("${units[@]}")

# Every integration test binary is in exactly one lane or in EXCLUSIVE, and every entry is
# a binary cargo built.
declare -A placed
for entry in "${EXCLUSIVE[@]}" "${lane_kube_slurm_2205[@]}" "${lane_slurm_2411[@]}" \
    "${lane_htcondor[@]}" "${lane_pbs[@]}" "${lane_local[@]}"; do
    key=${entry%% *}
    placed[$key]=1
    [[ -v "executable[$key]" ]] || { echo "tests/lanes.sh: $key: no such test binary" >&2; exit 1; }
done
for key in "${!executable[@]}"; do
    [[ -v "placed[$key]" ]] || { echo "tests/lanes.sh: $key is in no lane: add it to one, or to EXCLUSIVE" >&2; exit 1; }
done

# logged LABEL COMMAND...: runs COMMAND into a log of its own, then prints the log whole
# (one at a time) and records LABEL if COMMAND failed.
logged() {
    local label=$1 log start=$SECONDS status=0
    shift
    log=$(mktemp "$logs/XXXXXX.log")
    "$@" >"$log" 2>&1 || status=$?
    {
        flock 9
        echo "     Running $label ($((SECONDS - start)) s, exit $status)"
        cat "$log"
        ((status == 0)) || echo "$label" >>"$logs/failed"
    } 9>>"$logs/print.lock"
}

# run ENTRY: the test binary ENTRY names, from its package's directory, as cargo runs it.
run() {
    local key=${1%% *} args=()
    [[ $1 == *" "* ]] && read -ra args <<<"${1#* }"
    logged "$1" env -C "${package_dir[$key]}" CARGO_MANIFEST_DIR="${package_dir[$key]}" \
        CARGO="$cargo" "${executable[$key]}" "${args[@]}"
}

# lane NAME: lane_NAME's binaries, one after another.
lane() {
    local start=$SECONDS entry
    local -n entries="lane_$1"
    for entry in "${entries[@]}"; do
        run "$entry"
    done
    if [[ $1 == local ]]; then
        logged doctests "$cargo" test --workspace --locked --doc
    fi
    flock "$logs/print.lock" echo "lane $1: ${#entries[@]} binaries in $((SECONDS - start)) s"
}

start=$SECONDS
for name in kube_slurm_2205 slurm_2411 htcondor pbs local; do
    lane "$name" &
done
wait
echo "lanes: $((SECONDS - start)) s"

if [[ ${BATCHBRIDGE_SKIP_EXCLUSIVE:-} == 1 ]]; then
    echo "BATCHBRIDGE_SKIP_EXCLUSIVE=1: NOT A FULL RUN, skipped: ${EXCLUSIVE[*]}"
else
    start=$SECONDS
    for entry in "${EXCLUSIVE[@]}"; do
        run "$entry"
    done
    echo "exclusive binaries: $((SECONDS - start)) s"
fi

if [[ -s $logs/failed ]]; then
    echo "error: $(wc -l <"$logs/failed") test runs failed:"
    sed 's/^/    /' "$logs/failed"
    exit 1
fi
