#!/usr/bin/env bash
# The whole test suite, as CI runs it. Needs root: it installs and starts the test bed
# (tests/testbed/up.sh) in the background while it checks that no scheduler word leaks
# into the operator, formatting, lints and docs, checks the library crates as an
# application gets them (tests/library.sh) and builds the tests; then, with the bed up, it
# runs every test, and runs the quickstart, checking that it shows
# Queued -> Running -> Succeeded and the output.
# The last line totals every test, the quickstart counted as one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

# jq reads cargo's list of test binaries (tests/lanes.sh); make builds jemalloc, the
# operator binary's allocator (tikv-jemalloc-sys).
missing=()
for tool in jq make; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A cold test bed takes about 19 minutes, mostly downloads, package installs and waits
# for daemons; none of the checks and builds below need it, so they run meanwhile.
bed_log=$(mktemp)
log=$(mktemp)
trap 'rm -f "$log" "$bed_log"' EXIT
bash tests/testbed/up.sh >"$bed_log" 2>&1 &
bed=$!

# Scheduler vocabulary stays inside its backend: the operator decides on the causes and
# states the backends report, never on a scheduler's own words.
scheduler_words='PENDING|RUNNING|COMPLETED|COMPLETING|FAILED|TIMEOUT|NODE_FAIL|BOOT_FAIL|PREEMPT(ED)?|OUT_OF_MEMORY|CANCELLED|SUSPENDED|REQUEUED|DEADLINE|REMOVED|REVOKED|SPECIAL_EXIT'
if grep -rnwE "$scheduler_words" batchbridge-operator/src >&2; then
    echo "scheduler state words in batchbridge-operator/src (above): map the backend's cause or state instead" >&2
    exit 1
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
diff -u <(cat deploy/crds/batchbridge.dev_*.yaml) <(cargo run --locked -q -p batchbridge-operator --bin crdgen) >&2 || { echo "deploy/crds is stale: run cargo run -p batchbridge-operator --bin crdgen -- --write" >&2; exit 1; }
# The library crates as an application gets them: lowest dependency versions, a new
# application on tokio ~1.47, packaging (tests/library.sh says how).
bash tests/library.sh
cargo test --workspace --locked --no-run
bed_status=0
wait "$bed" || bed_status=$?
cat "$bed_log"
((bed_status == 0)) || { echo "tests/testbed/up.sh failed (exit $bed_status)" >&2; exit 1; }
# total QUICKSTART: the last line, every test binary's and the doctests' results, and the
# quickstart counted as one test that passed (1) or did not run (0).
total() {
    awk -v quickstart="$1" '/^test result:/ { passed += $4; failed += $6 }
        END { printf "total: %d passed, %d failed\n", passed + quickstart, failed }' "$log"
}
tests_status=0
bash tests/lanes.sh 2>&1 | tee "$log" || tests_status=$?
((tests_status == 0)) || { total 0; exit 1; }

quickstart=$(cargo run --locked --quiet --example quickstart)
printf '%s\n' "$quickstart"
states=$(printf '%s\n' "$quickstart" | grep -x -e Queued -e Running -e Succeeded | paste -sd' ')
if [[ "$states" != "Queued Running Succeeded" ]] || ! grep -qx 'step 3 of 3' <<<"$quickstart"; then
    echo "quickstart: expected Queued Running Succeeded and the script's output, got: $states" >&2
    exit 1
fi
total 1
