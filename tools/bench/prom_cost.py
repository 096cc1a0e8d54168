#!/usr/bin/env python3
"""What the user's Prometheus pays for the exporter's series (issue 48, item 3).

Per fleet size it starts the fake API (examples/fake_api) once, and for each exporter
binary in turn (``--exporter old=PATH --exporter new=PATH``): ``--replicas`` exporter
replicas (the chart's default: two) on it, plain HTTP and ``--auth=none`` as in the bench,
each waited for until ready and its stale verdicts settled; then a fresh Prometheus 3
(tools/prometheus3/build.sh) scraping them every ``--scrape-interval`` seconds (default 30, the
chart's; the timeout is the interval). After the
first ``--warmup-rounds`` scrape rounds (a round: every replica scraped once; the first
creates the series) it measures ``--rounds`` more, and prints, per binary:

- samples per scrape per replica (``scrape_samples_scraped``), series added by the first scrape;
- Prometheus's head series (``prometheus_tsdb_head_series`` read from its own /metrics, not
  scraped: a self-scrape would add series), its RSS (VmRSS) and Go heap in use at the end,
  and its CPU seconds (utime + stime from /proc) per measured round; the scrapes' average and longest
  duration, and how many failed (``up`` 0: a round without its samples);
- beside them each replica's RSS and CPU seconds per round, and the body sizes.

Everything it starts is stopped by PID (also on failure and Ctrl-C); logs stay in ``--workdir``.
Nothing is judged: the figures are printed (and with ``--json`` saved).

  python3 tools/bench/prom_cost.py --exporter old=/tmp/old/captf-lock-exporter \\
      --exporter new=target/release/captf-lock-exporter --fake-api target/release/examples/fake_api \\
      10000 100000
  python3 tools/bench/prom_cost.py --smoke --exporter target/release/captf-lock-exporter \\
      --fake-api target/release/examples/fake_api      # 1k objects, 1 s interval: about 30 s

An exporter spec may carry arguments: ``--exporter 'dense=PATH --export-idle-objects'``.
Only the standard library and aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parents[1]))  # tools/: the shared procs module
from procs import (exporter_env, free_port, start, stop, stop_all, stop_all_on_signals,  # noqa: E402
                   wait_for, write_fake_kubeconfig)

CLK_TCK = os.sysconf("SC_CLK_TCK")
MiB = 1024 * 1024
#: the session does not decompress (the gzip body's size is measured): ask for plain text
IDENTITY = {"Accept-Encoding": "identity"}
UNVERIFIED = re.compile(rb'\ncaptf_state_locks_held\{class="own_unverified"\} (\S+)')


def log(*a: object) -> None:
    print("[prom_cost]", *a, file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def prometheus_binary(given: str) -> str:
    if given:
        return given
    build = ROOT / "tools/prometheus3/build.sh"

    def cached(out: str) -> str:
        for line in out.splitlines():
            if line.startswith("PROM3_PROMETHEUS="):
                return line.split("=", 1)[1]
        return ""
    # --print-env builds nothing (and exits 3 while any of its four binaries is missing).
    path = cached(subprocess.run([str(build), "--print-env"], capture_output=True, text=True).stdout)
    if path and os.access(path, os.X_OK):
        return path
    log("building Prometheus 3 with tools/prometheus3/build.sh (minutes the first time)")
    out = subprocess.run(["nice", "-n", "10", str(build), "--env"], check=True, capture_output=True, text=True).stdout
    path = cached(out)
    if not path:
        raise RuntimeError(f"{build} --env printed no PROM3_PROMETHEUS")
    return path


def metric_value(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


async def measure_binary(args, n: int, api: str, workdir: Path, prom_bin: str, name: str, argv: list[str]) -> dict:
    res: dict = {"objects": n, "binary": name, "argv": argv[1:], "replicas": args.replicas}
    kubeconfig = write_fake_kubeconfig(workdir / f"kubeconfig-{n}", api)
    exporters, ports = [], []
    prom = None
    t_session = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=t_session, auto_decompress=False) as s:
        try:
            for r in range(args.replicas):
                port = free_port()
                ports.append(port)
                exporters.append(start(argv + ["--kubeconfig", str(kubeconfig), "--listen-address",
                                               f"127.0.0.1:{port}", "--plain-http", "--auth=none", "--log-level", "warn"],
                                       workdir / f"exporter-{n}-{name}-{r}.log", env=exporter_env()))

            async def settled(port, p):
                if p.poll() is not None:
                    raise RuntimeError(f"exporter exited with {p.returncode}; see {workdir}")
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status != 200:
                        return False
                async with s.get(f"http://127.0.0.1:{port}/metrics", headers=IDENTITY) as r:
                    m = UNVERIFIED.search(await r.read())
                return m is not None and float(m.group(1)) == 0
            t = time.perf_counter()
            for port, p in zip(ports, exporters):
                await wait_for(lambda port=port, p=p: settled(port, p), 600 + n / 100, "an exporter ready and settled",
                               interval=0.5)
            res["settled_s"] = time.perf_counter() - t
            async with s.get(f"http://127.0.0.1:{ports[0]}/metrics", headers=IDENTITY) as r:
                res["body_plain_bytes"] = len(await r.read())
            async with s.get(f"http://127.0.0.1:{ports[0]}/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                res["body_gzip_bytes"] = len(await r.read())
            log(f"{n} {name}: {args.replicas} replicas settled in {res['settled_s']:.1f} s; "
                f"body {res['body_plain_bytes'] / 1e6:.1f} MB")

            pdir = workdir / f"prometheus-{n}-{name}"
            shutil.rmtree(pdir, ignore_errors=True)
            pdir.mkdir(parents=True)
            interval = args.scrape_interval
            cfg = pdir / "prometheus.yml"
            targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
            # The timeout is the interval (the longest Prometheus allows): a scrape cut short would
            # count as a round without its samples.
            cfg.write_text(f"global:\n  scrape_interval: {interval:g}s\n  scrape_timeout: {interval:g}s\n"
                           f"scrape_configs:\n- job_name: captf\n  static_configs:\n  - targets: [{targets}]\n")
            pport = free_port()
            papi = f"http://127.0.0.1:{pport}"
            prom = start([prom_bin, f"--config.file={cfg}", f"--storage.tsdb.path={pdir / 'data'}",
                          f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                         workdir / f"prometheus-{n}-{name}.log")
            exp_cpu0 = [cpu_seconds(p.pid) for p in exporters]

            async def query(expr: str) -> list:
                async with s.get(papi + "/api/v1/query", params={"query": expr}, headers=IDENTITY) as r:
                    body = await r.read()
                    if r.status != 200:  # 503 while its storage starts: wait_for tries again
                        raise aiohttp.ClientError(f"query {expr}: {r.status} {body[:200]!r}")
                    return json.loads(body)["data"]["result"]

            async def rounds_done() -> int:
                """Complete scrape rounds: the fewest scrapes any replica has had."""
                if prom.poll() is not None:
                    raise RuntimeError(f"prometheus exited; see {workdir}")
                r = await query('count_over_time(up{job="captf"}[1h])')
                if len(r) < len(ports):
                    return 0
                return int(min(float(x["value"][1]) for x in r))

            async def at_round(k: int, timeout: float):
                async def done():
                    return await rounds_done() >= k
                await wait_for(done, timeout, f"scrape round {k}", interval=min(1.0, interval / 4))

            per_round_timeout = 3 * interval + 60
            await at_round(args.warmup_rounds, per_round_timeout * args.warmup_rounds + 120)
            c0, t0 = cpu_seconds(prom.pid), time.perf_counter()
            e0 = [cpu_seconds(p.pid) for p in exporters]
            await at_round(args.warmup_rounds + args.rounds, per_round_timeout * args.rounds)
            c1, t1 = cpu_seconds(prom.pid), time.perf_counter()
            e1 = [cpu_seconds(p.pid) for p in exporters]
            res["prom_cpu_first_s"] = c0  # start-up and the warm-up rounds (the first one creates the series)
            res["prom_cpu_per_round_s"] = (c1 - c0) / args.rounds
            res["measured_s"] = t1 - t0
            res["exporter_cpu_per_round_s"] = [(b - a) / args.rounds for a, b in zip(e0, e1)]
            res["exporter_cpu_warmup_s"] = [b - a for a, b in zip(exp_cpu0, e0)]
            res["prom_rss_mib"] = rss_mib(prom.pid)
            res["prom_hwm_mib"] = rss_mib(prom.pid, "VmHWM")
            res["exporter_rss_mib"] = [rss_mib(p.pid) for p in exporters]
            async with s.get(papi + "/metrics", headers=IDENTITY) as r:
                own = (await r.read()).decode()
            res["head_series"] = metric_value(own, "prometheus_tsdb_head_series")
            res["prom_heap_inuse_mib"] = (metric_value(own, "go_memstats_heap_inuse_bytes") or 0) / MiB
            samples = await query('scrape_samples_scraped{job="captf"}')
            res["samples_per_scrape"] = sorted(float(x["value"][1]) for x in samples)
            added = await query('max_over_time(scrape_series_added{job="captf"}[1h])')
            res["series_added_first"] = sorted(float(x["value"][1]) for x in added)
            dur = await query('avg_over_time(scrape_duration_seconds{job="captf"}[1h])')
            res["scrape_duration_avg_s"] = sorted(float(x["value"][1]) for x in dur)
            dur = await query('max_over_time(scrape_duration_seconds{job="captf"}[1h])')
            res["scrape_duration_max_s"] = max((float(x["value"][1]) for x in dur), default=None)
            failed = await query('sum(count_over_time(up{job="captf"}[1h])) - sum(sum_over_time(up{job="captf"}[1h]))')
            res["failed_scrapes"] = int(float(failed[0]["value"][1])) if failed else None
            log(f"{n} {name}: {res['samples_per_scrape']} samples per scrape, {res['head_series']:.0f} head series, "
                f"Prometheus {res['prom_rss_mib']:.0f} MiB, {res['prom_cpu_per_round_s']:.2f} CPU-s per round")
            for p in exporters:
                if p.poll() is not None:
                    raise RuntimeError(f"an exporter exited with {p.returncode}; see {workdir}")
            return res
        finally:
            stop(prom)
            for p in exporters:
                stop(p)


async def run_size(args, n: int, exporters, workdir: Path, prom_bin: str) -> list[dict]:
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    fake = start([args.fake_api, "--objects", str(n), "--held-fraction", str(args.held_fraction), "--port", str(port)]
                 + (["--captf-status"] if args.captf_status else []), workdir / f"fake_api-{n}.log")
    try:
        async with aiohttp.ClientSession() as s:
            async def up():
                if fake.poll() is not None:
                    raise RuntimeError(f"fake API exited; see {workdir}")
                async with s.get(api + "/_stats") as r:
                    return r.status == 200
            await wait_for(up, 600 + n / 200, "the fake API", interval=0.2)
            async with s.get(api + "/_info") as r:
                info = json.loads(await r.read())
        out = []
        for name, argv in exporters:
            r = await measure_binary(args, n, api, workdir, prom_bin, name, argv)
            r["held"] = len(info["held"])
            r["leases"] = info["items"]["leases"]
            r["captf_status"] = args.captf_status
            out.append(r)
        return out
    finally:
        stop(fake)


def per10k(r: dict, key: str) -> float:
    return r[key] * 10_000 / r["objects"]


def report(results: list[dict]) -> str:
    lines = ["| objects (held) | binary | samples per scrape per replica (per object) | head series | "
             "Prometheus RSS / Go heap MiB | Prometheus CPU-s per round | scrape duration avg (max; failed) | "
             "body plain / gzip | "
             "exporter RSS MiB (each) | exporter CPU-s per round (each) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        samples = r["samples_per_scrape"]
        s0 = samples[0] if samples else 0
        lines.append(
            f"| {r['objects']:,} ({r['held']:,}) | {r['binary']} | {s0:,.0f} ({s0 / r['objects']:.2f}) | "
            f"{r['head_series']:,.0f} | {r['prom_rss_mib']:.0f} / {r['prom_heap_inuse_mib']:.0f} | "
            f"{r['prom_cpu_per_round_s']:.2f} | "
            f"{', '.join(f'{d:.2f}' for d in r['scrape_duration_avg_s'])} s "
            f"({r['scrape_duration_max_s']:.2f} s; {r['failed_scrapes']}) | "
            f"{r['body_plain_bytes'] / 1e6:.1f} MB / {r['body_gzip_bytes'] / 1e6:.2f} MB | "
            f"{', '.join(f'{x:.0f}' for x in r['exporter_rss_mib'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['exporter_cpu_per_round_s'])} |")
    lines += ["", "Per 10k objects (each size's figures x 10,000 / objects):", "",
              "| objects | binary | head series | Prometheus RSS MiB | Prometheus CPU-s per round |",
              "| --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['objects']:,} | {r['binary']} | {per10k(r, 'head_series'):,.0f} | "
                     f"{per10k(r, 'prom_rss_mib'):.0f} | {per10k(r, 'prom_cpu_per_round_s'):.2f} |")
    return "\n".join(lines)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, help="fleet sizes (default 10000 100000; --smoke: 1000)")
    ap.add_argument("--exporter", required=True, action="append", metavar="[NAME=]PATH [ARGS]",
                    help="an exporter binary, with extra arguments if any; give it several times to compare")
    ap.add_argument("--fake-api", required=True, help="the fake API binary (target/release/examples/fake_api)")
    ap.add_argument("--prometheus", default="", help="the Prometheus 3 binary (default: tools/prometheus3/build.sh's)")
    ap.add_argument("--held-fraction", type=float, default=0.1)
    ap.add_argument("--captf-status", action="store_true",
                    help="the fake API's objects carry CAPTF's status (StateReadable, activeJob), as a real fleet's do")
    ap.add_argument("--replicas", type=int, default=2, help="exporter replicas scraped (the chart's default: 2)")
    ap.add_argument("--scrape-interval", type=float, default=30,
                    help="seconds, also the scrape timeout (default 30: the chart's ServiceMonitor interval)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="scrape rounds before measuring (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="scrape rounds measured (default 3)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI size: 1000 objects, 1 s interval, 1 warm-up and 2 measured rounds (about 30 s)")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    if args.smoke:
        args.sizes = args.sizes or [1000]
        args.scrape_interval, args.warmup_rounds, args.rounds = 1, 1, 2
    sizes = args.sizes or [10_000, 100_000]
    exporters = []
    for spec in args.exporter:
        words = shlex.split(spec)
        name, sep, path = words[0].partition("=")
        if not sep or "/" in name:
            name, path = (Path(words[0]).name if len(args.exporter) > 1 else "exporter"), words[0]
        exporters.append((name, [path] + words[1:]))
    if len({n for n, _ in exporters}) != len(exporters):
        ap.error("--exporter: give each binary its own NAME (NAME=PATH)")
    stop_all_on_signals()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="captf-promcost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"logs in {workdir}")
    prom_bin = prometheus_binary(args.prometheus)
    load_before = os.getloadavg()
    t = time.perf_counter()
    results = []
    try:
        for n in sizes:
            results += await run_size(args, n, exporters, workdir, prom_bin)
    finally:
        stop_all()
    version = subprocess.run([prom_bin, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n## What Prometheus pays ({when}; {version}; {args.replicas} replicas, {args.scrape_interval:g} s "
          f"interval, {args.rounds} rounds measured after {args.warmup_rounds}; held fraction {args.held_fraction}"
          f"{'; objects with CAPTF status' if args.captf_status else ''}; load average {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; wall time {time.perf_counter() - t:.0f} s)\n")
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
