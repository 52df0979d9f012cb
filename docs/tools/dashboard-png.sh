#!/usr/bin/env bash
# Makes docs/dashboard.png, README's picture of the Grafana dashboard's panels
# (deploy/grafana/batchbridge.json), from a real run: the operator benchmark
# (batchbridge-operator/tests/scale_bench.rs) runs the operator binary against the test bed's
# kube-apiserver and SLURM, this script scrapes the operator's /metrics every few seconds into
# a file while it runs, and docs/tools/plot_dashboard.py computes each panel's query from the
# scrapes (the same PromQL functions: sum by, rate, histogram_quantile) and plots them.
#
# A documentation tool, not part of CI. Needs the test bed up (bash tests/testbed/up.sh) and
# root for apt-get (it installs python3-matplotlib). Usage:
#
#   bash docs/tools/dashboard-png.sh [SCRAPES_FILE]
#
# Settings (environment), passed to the benchmark: JOBS (80), SLEEP (seconds each job runs,
# 30), EVERY (seconds between scrapes, 2). The scrapes stay in SCRAPES_FILE
# (/tmp/batchbridge-scrapes.txt): `/usr/bin/python3 docs/tools/plot_dashboard.py FILE docs/dashboard.png`
# plots them again without a new run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
scrapes=${1:-/tmp/batchbridge-scrapes.txt}
every=${EVERY:-2}
# Debian's python, which apt's matplotlib is for (a python3 earlier on PATH may not see it).
python=/usr/bin/python3

if ! "$python" -c 'import matplotlib' 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null
fi

# The benchmark, small: JOBS jobs of SLEEP seconds on the test bed's 16 SLURM CPUs queue for
# a few rounds, so queue wait and run time both have something to show.
jobs=${JOBS:-80} sleep=${SLEEP:-30}
BATCHBRIDGE_BENCH_JOBS=$jobs BATCHBRIDGE_BENCH_SLEEP=$sleep \
    BATCHBRIDGE_BENCH_IDLE=20 BATCHBRIDGE_BENCH_NICE=0 \
    cargo test -p batchbridge-operator --locked --test scale_bench -- --ignored --nocapture \
    >/tmp/batchbridge-bench.log 2>&1 &
bench=$!

# The benchmark's operator is the batchbridge-operator process electing on its Lease; its
# METRICS_ADDR (a free port the benchmark chose) is in its environment.
operator_address() {
    local environ
    for environ in /proc/[0-9]*/environ; do
        if tr '\0' '\n' <"$environ" 2>/dev/null | grep -qx 'LEASE_NAME=batchbridge-operator-bench'; then
            tr '\0' '\n' <"$environ" | sed -n 's/^METRICS_ADDR=//p'
            return 0
        fi
    done 2>/dev/null
    return 1
}

: >"$scrapes"
while kill -0 "$bench" 2>/dev/null; do
    if address=$(operator_address) && [ -n "$address" ]; then
        if text=$(curl -sf --max-time 2 "http://$address/metrics"); then
            printf '# scraped at %s\n%s\n' "$(date +%s.%N)" "$text" >>"$scrapes"
        fi
    fi
    sleep "$every"
done
wait "$bench" || { tail -40 /tmp/batchbridge-bench.log; exit 1; }
echo "$(grep -c '^# scraped at' "$scrapes") scrapes in $scrapes"
"$python" docs/tools/plot_dashboard.py "$scrapes" docs/dashboard.png \
    "the operator benchmark: $jobs jobs of $sleep s created at once on the test bed's SLURM (16 CPUs), scraped every $every s"
