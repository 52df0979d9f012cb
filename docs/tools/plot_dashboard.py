#!/usr/bin/env python3
"""Plots the Grafana dashboard's panels (deploy/grafana/batchbridge.json) from scrapes of the
operator's /metrics, as docs/tools/dashboard-png.sh collects them: each scrape is a line
`# scraped at UNIX_TIME` followed by the Prometheus text. Each panel computes its dashboard
query the way Prometheus would (sum by, rate over a trailing window, histogram_quantile with
linear interpolation inside a bucket) at every scrape.

    python3 docs/tools/plot_dashboard.py SCRAPES_FILE OUTPUT.png [WHAT_RAN]

WHAT_RAN, when given, goes into the picture's title.
"""

import math
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
# The dashboard's $__rate_interval, for a few-second scrape.
WINDOW = 60.0


def read_scrapes(path):
    """[(time, {(name, ((label, value), ...)): value})] in scrape order."""
    scrapes = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("# scraped at "):
                scrapes.append((float(line.split()[-1]), {}))
            elif scrapes and not line.startswith("#"):
                match = SAMPLE.match(line)
                if match:
                    name, labels, value = match.groups()
                    key = (name, tuple(sorted(LABEL.findall(labels or ""))))
                    scrapes[-1][1][key] = float(value)
    if not scrapes:
        sys.exit(f"no scrapes in {path}")
    return scrapes


def sum_by(sample, name, by):
    """sum by (BY) (NAME) of one scrape: {label values: sum}."""
    sums = defaultdict(float)
    for (metric, labels), value in sample.items():
        if metric == name:
            labels = dict(labels)
            sums[tuple(labels.get(label, "") for label in by)] += value
    return sums


def increase(scrapes, i, name, by):
    """sum by (BY) (increase(NAME[WINDOW])) at scrape i, as rate() * WINDOW would give it
    (a counter that appears within the window counts from 0)."""
    now, sample = scrapes[i]
    j = i
    while j > 0 and now - scrapes[j - 1][0] <= WINDOW:
        j -= 1
    then, earlier = scrapes[j]
    current, before = sum_by(sample, name, by), sum_by(earlier, name, by)
    span = max(now - then, 1e-9)
    return {key: max(value - before.get(key, 0.0), 0.0) for key, value in current.items()}, span


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile over {le: cumulative count}; None without observations."""
    bounds = sorted(buckets, key=lambda le: math.inf if le == "+Inf" else float(le))
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for le in bounds:
        upper = math.inf if le == "+Inf" else float(le)
        count = buckets[le]
        if count >= rank:
            if upper == math.inf:
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


def quantile_series(scrapes, family, by, quantiles):
    """histogram_quantile(Q, sum by (le, BY) (rate(FAMILY_bucket[WINDOW]))) per scrape."""
    lines = defaultdict(lambda: ([], []))
    for i in range(1, len(scrapes)):
        grown, _ = increase(scrapes, i, family + "_bucket", ("le",) + by)
        groups = defaultdict(dict)
        for (le, *rest), value in grown.items():
            groups[tuple(rest)][le] = value
        for group, buckets in groups.items():
            for q in quantiles:
                value = histogram_quantile(q, buckets)
                if value is not None:
                    xs, ys = lines[(group, q)]
                    xs.append(scrapes[i][0])
                    ys.append(value)
    return lines


def plot_rates(ax, scrapes, minutes, suffix_by_name, by):
    """sum by (BY) (rate(NAME[WINDOW])) of each counter NAME, labelled with its suffix."""
    for name, suffix in suffix_by_name.items():
        rates = defaultdict(lambda: ([], []))
        for i in range(1, len(scrapes)):
            grown, span = increase(scrapes, i, name, by)
            for key, value in grown.items():
                rates[key][0].append(scrapes[i][0])
                rates[key][1].append(value / span)
        for key, (xs, ys) in sorted(rates.items()):
            ax.plot(minutes(xs), ys, label=" ".join(key) + suffix)
    ax.set_ylabel("per second")


def main(scrapes_path, output, what_ran=None):
    scrapes = read_scrapes(scrapes_path)
    start = scrapes[0][0]
    minutes = lambda times: [(t - start) / 60 for t in times]  # noqa: E731
    figure, axes = plt.subplots(6, 2, figsize=(14, 22))
    axes = iter(axes.flat)

    ax = next(axes)
    phases = sorted({key for _, s in scrapes for key in sum_by(s, "batchbridge_jobs", ("batchcluster", "phase"))})
    times = [t for t, _ in scrapes]
    stacks = [[sum_by(s, "batchbridge_jobs", ("batchcluster", "phase")).get(p, 0) for _, s in scrapes] for p in phases]
    if phases:
        ax.stackplot(minutes(times), stacks, labels=[f"{c} {p}" for c, p in phases])
    ax.set_title("Jobs by phase and cluster")

    ax = next(axes)
    clusters = sorted({k for _, s in scrapes for k in sum_by(s, "batchbridge_cluster_reachable", ("batchjob_namespace", "batchcluster"))})
    for cluster in clusters:
        ys = [sum_by(s, "batchbridge_cluster_reachable", ("batchjob_namespace", "batchcluster")).get(cluster, math.nan) for _, s in scrapes]
        ax.plot(minutes(times), ys, label="/".join(cluster))
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Cluster reachable")

    for family, title, by in [
        ("batchbridge_job_queue_wait_seconds", "Queue wait (submit to start)", ("batchcluster",)),
        ("batchbridge_job_run_time_seconds", "Run time (start to finish)", ("batchcluster", "outcome")),
        ("batchbridge_poll_duration_seconds", "Status lag: poll duration", ("batchcluster",)),
    ]:
        ax = next(axes)
        for (group, q), (xs, ys) in sorted(quantile_series(scrapes, family, by, (0.5, 0.9)).items()):
            ax.plot(minutes(xs), ys, label=f"{' '.join(group)} p{int(q * 100)}")
        ax.set_ylabel("seconds")
        ax.set_title(title)

    ax = next(axes)
    lanes = sorted({k for _, s in scrapes for k in sum_by(s, "batchbridge_reconciles_waiting", ("lane",))})
    for lane in lanes:
        ax.plot(minutes(times), [sum_by(s, "batchbridge_reconciles_waiting", ("lane",)).get(lane, 0) for _, s in scrapes], label=lane[0])
    ax.set_title("Status lag: reconciles waiting")

    for suffix_by_name, title, by in [
        ({"batchbridge_scheduler_commands_total": ""}, "Scheduler command rate", ("batchcluster", "command")),
        ({"batchbridge_submits_total": " submits", "batchbridge_submit_failures_total": " failures"}, "Submits and failures", ("batchcluster",)),
    ]:
        ax = next(axes)
        plot_rates(ax, scrapes, minutes, suffix_by_name, by)
        ax.set_title(title)

    ax = next(axes)
    plot_rates(ax, scrapes, minutes, {"batchbridge_reconcile_errors_total": ""}, ("controller", "reason"))
    ax.set_title("Reconcile errors")

    ax = next(axes)
    for (version,) in sorted({k for _, s in scrapes for k in sum_by(s, "batchbridge_build_info", ("version",))}):
        ys = [sum_by(s, "batchbridge_build_info", ("version",)).get((version,), math.nan) for _, s in scrapes]
        ax.plot(minutes(times), ys, label=f"version {version}")
    ax.plot(minutes(times), [sum(sum_by(s, "batchbridge_leader", ()).values()) for _, s in scrapes], "--", label="replicas leading")
    ax.set_title("Operator")

    ax = next(axes)
    expiring = defaultdict(lambda: ([], []))
    for t, sample in scrapes:
        for key, value in sum_by(sample, "batchbridge_credential_expiry_timestamp_seconds", ("batchjob_namespace", "batchcluster")).items():
            expiring[key][0].append(t)
            expiring[key][1].append(value - t)
    for key, (xs, ys) in sorted(expiring.items()):
        ax.plot(minutes(xs), ys, label="/".join(key))
    ax.set_ylabel("seconds")
    ax.set_title("Credential expiry (time left)")
    figure.delaxes(next(axes))

    for ax in figure.axes:
        if not ax.lines and not ax.collections:
            ax.text(0.5, 0.5, "no series in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="upper left")
    title = f"batchbridge dashboard's panels, from {len(scrapes)} scrapes of the operator's /metrics"
    figure.suptitle(f"{title}\n{what_ran}" if what_ran else title)
    figure.tight_layout(rect=(0, 0, 1, 0.96))
    figure.savefig(output, dpi=80)
    print(f"wrote {output}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
