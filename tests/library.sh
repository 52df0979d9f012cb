#!/usr/bin/env bash
# The library crates (core, slurm, htcondor, pbs) as an application gets them; needs no test bed,
# only crates.io. Three checks:
#  1. Lowest versions: in a copy of the workspace holding only the library crates (and the
#     test support crate their tests use), every requirement of [workspace.dependencies]
#     becomes exact (`"1.40.0"` -> `"=1.40.0"`), so cargo resolves each direct dependency to
#     the lowest version the manifests claim to work with; the crates must build there and
#     their unit tests pass (the integration tests need the test bed; building them too
#     added over a minute to the cold run here).
#  2. A new application on tokio's LTS line (`~1.47`) with its own serde pin (`=1.0.200`)
#     depends on the four crates by path, builds, implements BatchBackend through core's
#     re-exports alone (no async-trait of its own) and runs a job on the local backend.
#  3. Packaging: `cargo publish --workspace --dry-run` builds each package as crates.io would
#     get it, the CLI's (batchbridge-cli) against the packaged library crates; each package
#     holds src/lib.rs (the CLI: src/main.rs and Cargo.lock, which `cargo install --locked`
#     uses), README.md and LICENSE but no tests/ (they need the test bed and the
#     unpublished batchbridge-testbed crate), and the library crates' tests pass as packaged.
# Builds go to target/library-check (debuginfo off), so a second run is incremental.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
root=$PWD
export CARGO_TARGET_DIR=$root/target/library-check
export CARGO_PROFILE_DEV_DEBUG=0
# Old derive macros (serde 1.0.103's) emit cfgs today's rustc warns about inside our crates;
# lints are clippy's job, on the versions Cargo.lock pins.
export RUSTFLAGS="-A warnings"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
library=(batchbridge-core batchbridge-slurm batchbridge-htcondor batchbridge-pbs)

echo "== lowest declared versions" >&2
mkdir -p "$scratch/lowest/tests"
cp -a Cargo.toml Cargo.lock LICENSE "${library[@]}" "$scratch/lowest/"
cp -a tests/support "$scratch/lowest/tests/"
awk -v members='"batchbridge-core", "batchbridge-slurm", "batchbridge-htcondor", "batchbridge-pbs", "tests/support"' '
    /^members = \[/ { print "members = [" members "]"; skipping = 1 }
    skipping { if (/\]/) skipping = 0; next }
    /^\[/ { section = $0 }
    section == "[workspace.dependencies]" { sub(/^[A-Za-z0-9_-]+ = "/, "&="); sub(/version = "/, "&=") }
    { print }
' Cargo.toml >"$scratch/lowest/Cargo.toml"
# Without --locked: cargo moves exactly what the exact requirements force, starting from
# our lock. The resolved direct dependencies are printed, for the log.
(cd "$scratch/lowest" && cargo tree -q -e normal --depth 1 --prefix none \
    -p batchbridge-core -p batchbridge-slurm -p batchbridge-htcondor -p batchbridge-pbs \
    | grep -v '^batchbridge' | sed 's/ (\*)$//' | sort -u | paste -sd' ' >&2)
(cd "$scratch/lowest" && cargo test -q --workspace --lib)

echo "== an application on tokio ~1.47 and serde =1.0.200" >&2
mkdir -p "$scratch/app/src"
cat >"$scratch/app/Cargo.toml" <<EOF
[package]
name = "library-user"
version = "0.1.0"
# An application on the previous edition: the crates' 2024 edition must not leak.
edition = "2021"
publish = false

[dependencies]
batchbridge-core = { path = "$root/batchbridge-core" }
batchbridge-htcondor = { path = "$root/batchbridge-htcondor" }
batchbridge-pbs = { path = "$root/batchbridge-pbs" }
batchbridge-slurm = { path = "$root/batchbridge-slurm" }
serde = { version = "=1.0.200", features = ["derive"] }
serde_json = "1"
tokio = { version = "~1.47", features = ["macros", "rt-multi-thread"] }
EOF
cat >"$scratch/app/src/main.rs" <<'EOF'
use std::collections::HashMap;
use std::sync::Arc;

use batchbridge_core::shell::LocalShell;
use batchbridge_core::{
    BatchBackend, Capabilities, Error, ErrorKind, JobId, JobKey, JobOutput, JobSpec, JobStatus,
    LocalBackend, OutputRequest, Result, async_trait,
};

/// A backend of the application's own, written with core's re-export of `async_trait`.
struct Closed;

#[async_trait]
impl BatchBackend for Closed {
    fn name(&self) -> &str {
        "closed"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn submit(&self, _: &JobSpec) -> Result<JobId> {
        Err(Error::new(ErrorKind::Unsupported, "closed"))
    }
    async fn find(&self, _: &JobKey) -> Result<Option<JobId>> {
        Ok(None)
    }
    async fn status(&self, _: &[JobId]) -> Result<HashMap<JobId, JobStatus>> {
        Ok(HashMap::new())
    }
    async fn cancel(&self, _: &JobId) -> Result<()> {
        Ok(())
    }
    async fn fetch_output(&self, _: &JobId, _: &OutputRequest) -> Result<JobOutput> {
        Err(Error::new(ErrorKind::NotFound, "closed"))
    }
}

#[derive(serde::Serialize)]
struct Report {
    backends: Vec<String>,
    submitted: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let local = LocalBackend::new(std::env::current_dir()?.join("jobs"))?;
    let id = local.submit(&JobSpec::new(JobKey::new("library-user")?, "user", "true\n")).await?;
    let shell = Arc::new(LocalShell);
    let slurm = batchbridge_slurm::SlurmBackend::new(shell.clone(), Default::default())?;
    let condor = batchbridge_htcondor::HtcondorBackend::new(shell.clone(), Default::default())?;
    let pbs = batchbridge_pbs::PbsBackend::new(shell, Default::default())?;
    let backends = [&local as &dyn BatchBackend, &slurm, &condor, &pbs, &Closed];
    let report = Report {
        backends: backends.iter().map(|backend| backend.name().to_owned()).collect(),
        submitted: id.to_string(),
    };
    println!("{}", serde_json::to_string(&report).expect("a report serializes"));
    Ok(())
}
EOF
(cd "$scratch/app" && cargo generate-lockfile -q && cargo tree -q -e normal --depth 1 --prefix none \
    | grep -E '^(serde|tokio) ' | sed 's/ (\*)$//' | sort -u | paste -sd' ' >&2)
(cd "$scratch/app" && cargo run -q --locked) | tee "$scratch/app.out"
grep -qx '{"backends":\["local","slurm","htcondor","pbs","closed"\],"submitted":"[^"]\+"}' "$scratch/app.out" ||
    { echo "application: expected the five backends' names and a job id" >&2; exit 1; }

echo "== packages" >&2
# --allow-dirty: the check is of the tree it runs in, committed or not.
for crate in "${library[@]}" batchbridge-cli; do
    files=$(cargo package -q --list --allow-dirty -p "$crate")
    needs=(src/lib.rs)
    [[ $crate == batchbridge-cli ]] && needs=(src/main.rs Cargo.lock)
    for needed in "${needs[@]}" README.md LICENSE; do
        grep -qx "$needed" <<<"$files" || { echo "$crate: the package lacks $needed" >&2; exit 1; }
    done
    if grep -q '^tests/' <<<"$files"; then
        echo "$crate: the package holds tests that need the test bed: $(grep '^tests/' <<<"$files" | paste -sd' ')" >&2
        exit 1
    fi
done
# Packages and builds of an earlier run share the version number, and cargo takes a
# registry crate of the same name and version for unchanged: the dry run would verify
# slurm, htcondor and pbs against that run's core. Start from none: not in the target
# directory, and not where cargo extracted the dry run's temporary registry in CARGO_HOME
# (one directory per checkout path, so a CI machine reusing its path kept an old core).
rm -rf "$CARGO_TARGET_DIR/package"
for crate in "${library[@]}"; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$crate"-[0-9]*
    rm -f "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$crate"-[0-9]*.crate
done
cargo clean -q -p batchbridge-core -p batchbridge-slurm -p batchbridge-htcondor -p batchbridge-pbs
cargo publish -q --workspace --dry-run --allow-dirty
# The packages' own tests (unit tests and doctests) pass as packaged: without tests/ and
# without the dev-dependency on batchbridge-testbed, which cargo strips. slurm, htcondor
# and pbs get the packaged core through a patch, as they would get it from crates.io.
cargo package -q --allow-dirty --no-verify "${library[@]/#/--package=}"
mkdir "$scratch/packaged"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1) # [workspace.package]'s
members=()
for crate in "${library[@]}"; do
    tar -xzf "$CARGO_TARGET_DIR/package/$crate-$version.crate" -C "$scratch/packaged"
    members+=("\"$crate-$version\"")
done
cat >"$scratch/packaged/Cargo.toml" <<EOF
[workspace]
resolver = "3"
members = [$(IFS=,; echo "${members[*]}")]

[patch.crates-io]
batchbridge-core = { path = "batchbridge-core-$version" }
EOF
cp Cargo.lock "$scratch/packaged/"
(cd "$scratch/packaged" && cargo test -q --workspace)
echo "library: lowest versions, application and packages ok" >&2
