"""The bench's output: the Markdown table of every run, the details under it, and the issue-35
figures per size with one column per exporter binary (before/after from the same run). A figure a
run did not measure (the reduced mode's skipped phases, gzip when not served) prints as "–"."""

from __future__ import annotations

import statistics

#: what a cell shows for a figure the run did not measure
NONE = "–"


def fmt_ms(x: float | None) -> str:
    if x is None:
        return NONE
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    if x >= 10:
        return f"{x:.0f} ms"
    return f"{x:.2f} ms"


def fmt_size(b: float) -> str:
    return f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.0f} kB"


def fleet_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def run_label(r: dict) -> str:
    """The fleet size, marked when the run was in the reduced mode."""
    return fleet_label(r["objects"]) + (" (reduced)" if r.get("mode") == "reduced" else "")


def peak_mib(r: dict) -> float:
    """The highest peak RSS of the run: VmHWM at ready and the peaks of the scrape phases it ran."""
    keys = ("hwm_ready_mib", "peak_1_mib", "c10_peak_mib", "c16_peak_mib", "seq_peak_mib", "gzip_seq_peak_mib")
    return max(r[k] for k in keys if r.get(k) is not None)


def _lat(xs: list[float] | None) -> str:
    return NONE if xs is None else str([round(x) for x in xs])


def table(results: list[dict]) -> str:
    several = len({r["binary"] for r in results}) > 1
    head = ["binary"] * several + ["fleet (objects / Leases / held)", "plain fetch of all lists", "ready (CPU s); verdicts settled", "RSS ready / peak",
            "scrape p50 / p99", "static bytes p99", "ratio", "10 concurrent scrapers",
            "peak RSS 1 vs 16 concurrent", "exposition plain / gzip", "change→metric release / pod Failed (p99)",
            "scrape p50 / p99, a change every 100 ms",
            "idle CPU", "API req/min"]
    rows = []
    for r in results:
        gz = fmt_size(r["gzip_bytes"]) + (" (served)" if r["gzip_served"] else " (not served; gzip -1)")
        at_once = r.get("c16_n", 16)
        rows.append([r["binary"]] * several + [
            f"{run_label(r)} / {r['leases']} / {r['held']}",
            f"{fmt_ms(r['fetch_s'] * 1e3)} ({fmt_size(r['fetch_bytes'])}, {r['fetch_requests']} pages)",
            f"{r['ready_s']:.2f} s ({r['ready_cpu_s']:.2f}); settled +{r.get('settled_s', 0):.0f} s",
            f"{r['rss_ready_mib']:.0f} / {peak_mib(r):.0f} MiB",
            f"{fmt_ms(r['seq_p50_ms'])} / {fmt_ms(r['seq_p99_ms'])}",
            fmt_ms(r["static_p99_ms"]),
            f"{r['ratio_p99']:.1f}x" if r["ratio_p99"] < 10 else f"{r['ratio_p99']:.0f}x",
            NONE if r.get("c10_n") is None else
            f"p50 {fmt_ms(r['c10_p50_ms'])}, p99 {fmt_ms(r['c10_p99_ms'])}, peak RSS {r['c10_peak_mib']:.0f} MiB",
            f"{r['peak_1_mib']:.0f} / {r['c16_peak_mib']:.0f} MiB ({r['c16_peak_mib'] / max(r['peak_1_mib'], 1):.1f}x"
            + ("" if at_once == 16 else f"; {at_once} at once, not 16") + ")",
            f"{fmt_size(r['plain_bytes'])} / {gz}",
            f"{fmt_ms(r['release_median_ms'])} / {fmt_ms(r['pod_failed_median_ms'])} ({fmt_ms(r['change_p99_ms'])})",
            f"{fmt_ms(r['churn_p50_ms'])} / {fmt_ms(r['churn_p99_ms'])} ({r['churn_changes']} changes)",
            f"{r['idle_cpu_pct']:.1f} %",
            f"{r['req_per_min']:.1f}",
        ])
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def details(results: list[dict]) -> str:
    out = []
    several = len({r["binary"] for r in results}) > 1
    for r in results:
        who = f"{r['binary']} at " if several else ""
        rate = r.get("pod_read_rate")
        seq_peaks = [r[k] for k in ("seq_peak_mib", "gzip_seq_peak_mib") if r.get(k) is not None]
        out.append(f"- {who}{fleet_label(r['objects'])} ({r.get('mode', 'full')} mode): fake API built in "
                   + (f"{r['api_build_s']:.1f} s, RSS {r['api_rss_mib']:.0f} MiB (peak {r['api_hwm_mib']:.0f} MiB); "
                      if r.get("api_rss_mib") is not None else f"{r['api_build_s']:.1f} s; ")
                   + f"items served {r['items']}; list bytes "
                   f"{ {k: fmt_size(v) for k, v in r['api_bytes'].items()} }; plain fetch of the lists: "
                   f"{'median of ' if r.get('fetch_n', 3) > 1 else ''}{r.get('fetch_n', 3)}; list pages to ready "
                   f"{r['lists_to_ready']}; exporter --pod-read-rate {f'{rate}/s' if rate else 'default'}; "
                   f"pod GETs in the first 10 s after ready {r['pod_gets_first_10s']}, "
                   f"{r['pod_gets_total']} in all ({r['pod_gets_404']} answered 404); requests in the {r['idle_window_s']:.0f} s window "
                   f"{r['req_breakdown_window']}; sequential scrapes {r['seq_n']}, concurrent {r.get('c10_n') or NONE}, "
                   f"at once {r.get('c16_n', 16)}; "
                   f"release latencies {_lat(r['release_ms'])} ms, pod-failed "
                   f"{_lat(r['pod_failed_ms'])} ms; RSS after scrapes {r['rss_after_scrapes_mib']:.0f} MiB"
                   + (f", peak over the sequential scrapes {max(seq_peaks):.0f} MiB" if seq_peaks else "")
                   + (f"; gzip scrape p50 {fmt_ms(r['gzip_p50_ms'])}, gzip body decompresses to an exposition: "
                      f"{r['gzip_roundtrip_ok']}; gzip release latencies {_lat(r['gzip_release_ms'])} ms, "
                      f"pod-failed {_lat(r['gzip_pod_failed_ms'])} ms; gzip churn "
                      f"{r['gzip_churn_changes']} changes" if r["gzip_served"] else "")
                   + f"; RSS at rest {r['rss_rest_mib']:.0f} MiB, at the end {r['rss_end_mib']:.0f} MiB"
                   + f"; Content-Type {r['content_type']!r}")
        p = r.get("prometheus")
        if p:
            if "error" in p:
                out.append(f"- Prometheus at {who}{fleet_label(r['objects'])}: {p['error']}")
            else:
                d = p["scrape_duration_seconds"]
                out.append(f"- Prometheus 2.42 at {who}{fleet_label(r['objects'])}: scrape_duration_seconds "
                           f"{', '.join(f'{x:.2f}' for x in d)} s; scrape_samples_scraped "
                           f"{', '.join(f'{x:.0f}' for x in p['scrape_samples_scraped'])}; up "
                           f"{', '.join(f'{x:.0f}' for x in p['up'])}")
    return "\n".join(out)


def _med(runs: list[dict], key: str) -> float | None:
    """The median over the rounds of one binary (``None`` when a run did not measure it)."""
    xs = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(xs) if xs else None


def _vs(key: str, anchor: str, plus: bool = False):
    """A figure against its static anchor: as a ratio, or (``plus``) as the difference in ms."""
    def cell(runs: list[dict]) -> str:
        x, a = _med(runs, key), _med(runs, anchor)
        if x is None or a is None:
            return NONE
        return f"{fmt_ms(x)} vs {fmt_ms(a)} " + (f"({x - a:+.2f} ms)" if plus else f"({x / a:.2f}x)")
    return cell


def _worst(runs: list[dict], pre: str) -> str:
    worst = [max(r[pre + "release_ms"] + r[pre + "pod_failed_ms"], default=None) for r in runs]
    worst = [w for w in worst if w is not None]
    med = _med(runs, pre + "release_median_ms"), _med(runs, pre + "pod_failed_median_ms")
    if not worst:
        return NONE
    return f"max {fmt_ms(max(worst))} (medians {fmt_ms(med[0])} / {fmt_ms(med[1])})"


def _mib(x: float | None) -> str:
    return NONE if x is None else f"{x:.0f} MiB"


#: (figure, goal, how a binary's runs at one size read): issue 35's figures, in its order
FIGURES = [
    (f"scrape {p} {enc} vs static {enc}", "<= 1.2x" if p == "p50" else "",
     _vs(f"{pre}{'seq_' * (not pre)}{p}_ms", f"static_{pre}{p}_ms"))
    for p in ("p50", "p99") for enc, pre in (("plain", ""), ("gzip", "gzip_"))
] + [
    (f"p99 {enc}, a change every 100 ms, vs static {enc} p99", "<= +1 ms",
     _vs(f"{pre}churn_p99_ms", f"static_{pre}p99_ms", plus=True))
    for enc, pre in (("plain", ""), ("gzip", "gzip_"))
] + [
    ("change→metric plain (release / pod Failed)", "<= 250 ms", lambda rs: _worst(rs, "")),
    ("change→metric gzip (release / pod Failed)", "<= 250 ms",
     lambda rs: _worst(rs, "gzip_") if all(r["gzip_served"] for r in rs) else NONE),
    ("RSS at rest (after the quiet window)", "<= 40 MiB (10k)", lambda rs: _mib(_med(rs, "rss_rest_mib"))),
    ("gzip body / whole body at gzip -6", "<= 1.2x",
     lambda rs: NONE if _med(rs, "gzip_ratio") is None else
     f"{_med(rs, 'gzip_ratio'):.2f}x ({fmt_size(_med(rs, 'gzip_bytes'))} / {fmt_size(_med(rs, 'gzip_whole6_bytes'))})"),
    ("peak RSS, 10 scrapers", "100k: under 256 MiB with room", lambda rs: _mib(_med(rs, "c10_peak_mib"))),
    ("ready (floor: stream_cost.py)", "<= 1.2x the floor", lambda rs: fmt_ms(_med(rs, "ready_s") * 1e3)),
    ("idle CPU", "", lambda rs: NONE if _med(rs, "idle_cpu_pct") is None else f"{_med(rs, 'idle_cpu_pct'):.1f} %"),
]


def figures(results: list[dict]) -> str:
    """Per size, issue 35's figures with one column per binary; with several rounds each cell is
    the median over that binary's rounds (the max for change→metric)."""
    binaries = list(dict.fromkeys(r["binary"] for r in results))
    out = []
    for n in dict.fromkeys(r["objects"] for r in results):
        runs = {b: [r for r in results if r["objects"] == n and r["binary"] == b] for b in binaries}
        rounds = max(len(v) for v in runs.values())
        modes = sorted({r.get("mode", "full") for v in runs.values() for r in v})
        out.append(f"### Issue 35 figures at {fleet_label(n)} ({rounds} round{'s' * (rounds > 1)} per binary; "
                   f"{' and '.join(modes)} mode)\n")
        head = ["figure", "goal"] + binaries
        out.append("| " + " | ".join(head) + " |")
        out.append("| " + " | ".join("---" for _ in head) + " |")
        for name, goal, cell in FIGURES:
            out.append("| " + " | ".join([name, goal] + [cell(runs[b]) if runs[b] else NONE for b in binaries]) + " |")
        out.append("")
    return "\n".join(out)
