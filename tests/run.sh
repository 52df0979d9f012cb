#!/usr/bin/env bash
# The whole test suite, as CI runs it. Needs root: it installs and starts the test bed
# (tests/testbed/up.sh), then checks formatting, lints and docs, runs every test, and runs
# the quickstart, checking that it shows Queued -> Running -> Succeeded and the output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

bash tests/testbed/up.sh

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo test --workspace --locked

quickstart=$(cargo run --locked --quiet --example quickstart)
printf '%s\n' "$quickstart"
states=$(printf '%s\n' "$quickstart" | grep -x -e Queued -e Running -e Succeeded | paste -sd' ')
if [[ "$states" != "Queued Running Succeeded" ]] || ! grep -qx 'step 3 of 3' <<<"$quickstart"; then
    echo "quickstart: expected Queued Running Succeeded and the script's output, got: $states" >&2
    exit 1
fi
echo "quickstart: 1 passed, 0 failed"
