#!/usr/bin/env python3
"""Issue-9 benchmark driver: the real exporter binary against the fake API server.

Started by scripts/bench.sh (which builds the release binaries first). Per fleet size (and per
exporter binary and round, alternating binaries: ``--exporter old=PATH --exporter new=PATH``) it
starts ``fake_api`` and the exporter, measures over HTTP and /proc, stops both by PID, and at the
end prints one Markdown table (plus the API-request breakdown and, at the largest size, what a real
Prometheus 2.42 saw), then issue 35's figures per size with one column per binary. Nothing here asserts a time: the figures are printed, not judged. Every wait polls a
condition against a deadline.

From ``--reduced-from`` objects on (default 500,000) a run is in the reduced mode: the phases
whose time grows with the body times the number of scrapes are cut down (see ``Mode``), so a
1,000,000-object point (a 600 MB exposition) takes minutes, not hours; the tables say which runs
were reduced and print "–" for what a run did not measure.

Only the standard library and aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gzip
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the shared procs module
from procs import (exporter_env, free_port, start, stop, stop_all, stop_all_on_signals,  # noqa: E402
                   wait_for, write_fake_kubeconfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import details, figures, fleet_label, table  # noqa: E402
import churn_phases  # noqa: E402

PROM_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
               "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PLAIN = {"Accept": PROM_ACCEPT, "Accept-Encoding": "identity"}
GZIP = {"Accept": PROM_ACCEPT, "Accept-Encoding": "gzip"}
#: --pod-read-rate given to the exporter in the reduced mode unless the bench's flag says otherwise:
#: 1M objects have 33,333 gone holder pods, 11 min of reads at the exporter's default 50/s; at
#: 500/s they settle in about 67 s, what 100k take at the default.
REDUCED_POD_READ_RATE = 500
REDUCED_SUMMARY = ("5 sequential scrapes (or --scrapes) per encoding (and per anchor and churn battery), no 10 concurrent "
                   "scrapers, 4 scrapes at once instead of 16 (bodies dropped by the client as read), one "
                   "plain fetch of the lists, stale verdicts settled at the pod read rate shown under the "
                   "table; \"–\": not measured")
CLK_TCK = os.sysconf("SC_CLK_TCK")
MiB = 1024 * 1024


def log(*a: object) -> None:
    print("[bench]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# /proc (the processes themselves are started and stopped by tools/procs.py)
# ------------------------------------------------------------------------------------------------

def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def reset_peak(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRss:
    """Peak RSS of a phase: VmHWM after a reset, and VmRSS sampled every 5 ms as a fallback."""

    def __init__(self, pid: int):
        self.pid = pid
        self.max_kib = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.max_kib = max(self.max_kib, status_kib(self.pid, "VmRSS"))
            except OSError:
                return
            self._stop.wait(0.005)

    def __enter__(self):
        self.reset_ok = reset_peak(self.pid)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        try:
            if self.reset_ok:
                self.max_kib = max(self.max_kib, status_kib(self.pid, "VmHWM"))
        except OSError:
            pass

    @property
    def mib(self) -> float:
        return self.max_kib / 1024


# ------------------------------------------------------------------------------------------------
# HTTP measurements
# ------------------------------------------------------------------------------------------------

def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


class Mode:
    """What a run measures. The full mode is the one every earlier table was measured with; the
    reduced mode (from ``--reduced-from`` objects) keeps every figure of the cost curve (ready,
    RSS at ready / at rest / peak, scrape p50 plain and gzip, change→metric) and cuts what grows
    with the body times the number of scrapes: a few sequential scrapes, no 10 concurrent
    scrapers, 4 scrapes at once instead of 16 (the client drops their bodies as they arrive), one
    plain fetch of the lists instead of three, and longer deadlines."""

    def __init__(self, n: int, args):
        self.reduced = bool(args.reduced_from) and n >= args.reduced_from
        self.name = "reduced" if self.reduced else "full"
        big = n >= 50_000
        self.seq_n = args.scrapes or (5 if self.reduced else 50 if big else 100)
        self.c10 = not self.reduced              # the 10-concurrent-scrapers phase
        self.each = 3 if big else 10             # scrapes per scraper in it
        self.at_once = 4 if self.reduced else 16  # the "1 vs N at once" peak-RSS phase
        self.fetches = 1 if self.reduced else 3
        self.settle_interval = 2.0 if self.reduced else 0.5  # each poll is a whole scrape
        # Deadlines: the full mode's, or grown with the fleet (a 1M fleet is built in about a
        # minute, and a scrape of it moves 600 MB).
        k = max(1.0, n / 100_000)
        self.start_timeout = 600 if not self.reduced else 600 + 60 * k
        self.http_timeout = 600 if not self.reduced else 1800
        self.change_deadline = 60 if not self.reduced else 300
        self.pod_read_rate = args.pod_read_rate or (REDUCED_POD_READ_RATE if self.reduced else 0)
        # Stale verdicts: the gone holder pods (a third of the held locks) read at the pod read
        # rate (the exporter's default 50/s when not given), three times over, and 900 s at least.
        gone = n * args.held_fraction / 3
        self.settle_timeout = max(900.0, 3 * gone / (self.pod_read_rate or 50) + 300)


async def timed_get(session: aiohttp.ClientSession, url: str, headers: dict,
                    keep: bool = True) -> tuple[float, bytes, dict]:
    """One GET, the whole body read; with ``keep=False`` the body is read in chunks and dropped
    (so many concurrent 600 MB scrapes do not sit in the client's memory) and ``b""`` returned."""
    t = time.perf_counter()
    async with session.get(url, headers=headers) as r:
        if keep:
            body = await r.read()
        else:
            body = b""
            async for _ in r.content.iter_chunked(1 << 20):
                pass
        if r.status != 200:
            raise RuntimeError(f"GET {url}: {r.status}")
        return time.perf_counter() - t, body, dict(r.headers)


async def sequential(session, url, headers, n, keep: bool = True) -> list[float]:
    out = []
    for _ in range(n):
        dt_, _, _ = await timed_get(session, url, headers, keep)
        out.append(dt_)
    return out


async def concurrent(url, headers, scrapers: int, each: int, keep: bool = True, timeout: float = 600) -> list[float]:
    """``scrapers`` clients, each with its own connection, each scraping ``each`` times back to back."""
    async def one():
        async with aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            return await sequential(s, url, headers, each, keep)
    results = await asyncio.gather(*(one() for _ in range(scrapers)))
    return [x for r in results for x in r]


async def fetch_all_lists(session, api: str) -> tuple[float, int, int]:
    """A plain fetch of every list the exporter makes (all namespaces, limit=500, following
    continue), one after another: seconds, bytes, requests."""
    paths = ["/apis/coordination.k8s.io/v1/leases", "/api/v1/pods", "/apis/events.k8s.io/v1/events",
             "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformclusters",
             "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachines",
             "/apis/infrastructure.cluster.x-k8s.io/v1alpha1/terraformmachinepools",
             "/apis/cluster.x-k8s.io/v1beta2/clusters"]
    token = re.compile(rb'"continue":"([^"]*)"')
    t = time.perf_counter()
    total = reqs = 0
    for p in paths:
        cont = ""
        while True:
            q = {"limit": "500"}
            if cont:
                q["continue"] = cont
            async with session.get(api + p + "?" + urllib.parse.urlencode(q)) as r:
                body = await r.read()
            reqs += 1
            total += len(body)
            m = token.search(body, 0, 400)
            if not m or not m.group(1):
                break
            cont = m.group(1).decode()
    return time.perf_counter() - t, total, reqs


def metric_line(body: bytes, metric: str, namespace: str, name: str) -> bytes | None:
    """The sample line of ``metric`` for the object (namespace, name), found without parsing 40 MB."""
    needle = f'name="{name}"'.encode()
    start = 0
    while True:
        k = body.find(needle, start)
        if k < 0:
            return None
        a = body.rfind(b"\n", 0, k) + 1
        b = body.find(b"\n", k)
        line = body[a:b if b >= 0 else len(body)]
        if line.startswith(metric.encode() + b"{") and f'namespace="{namespace}"'.encode() in line:
            return line
        start = k + 1


#: the end of a /metrics body that may change without any series moving (the health part)
UNCHANGED_TAIL = 64 * 1024


def decoded(body: bytes, hdrs: dict) -> bytes:
    """The exposition text of a response read with ``auto_decompress=False`` (gzip is told by the
    header or, whatever the header's spelling, by the gzip magic bytes)."""
    gz = hdrs.get("Content-Encoding", "").lower() == "gzip" or body[:2] == b"\x1f\x8b"
    return gzip.decompress(body) if gz else body


async def change_latency(session, api, metrics_url, path: str, key: str, before, done, headers=PLAIN,
                         deadline_s: float = 60) -> float:
    """POSTs a change to the fake API, then scrapes back to back (with ``headers``: plain or gzip)
    until ``done(body)``. Returns the time from the POST to the end of the first scrape that shows
    it (an upper bound: it includes that scrape). Each body is checked (decompressed for gzip, then
    searched) in a thread beside the next scrape, at most two at a time, and only when its bytes
    moved (``check``): the client's own work is not the exporter's latency (at 100k a gzip body
    takes Python about 140 ms to decompress).
    ``before(body)`` must hold first, so a wrong pick cannot pass at once."""
    _, raw, hdrs = await timed_get(session, metrics_url, headers)
    body = decoded(raw, hdrs)
    if not before(body) or done(body):
        raise RuntimeError(f"{path}?{key}: /metrics does not show the state before the change")
    del body
    t0 = time.perf_counter()
    async with session.post(f"{api}{path}?{key}") as r:
        if r.status != 200:
            raise RuntimeError(f"POST {path}?{key}: {r.status} {await r.text()}")
    deadline = t0 + deadline_s
    pending: list[tuple[float, asyncio.Future]] = []
    # The CRC-32 of the body before the change but its last UNCHANGED_TAIL bytes (zlib.crc32
    # releases the GIL; slicing 61 MB to compare would copy it and hold the GIL meanwhile).
    prev_crc = [zlib.crc32(memoryview(raw)[:-UNCHANGED_TAIL])]

    def first_shown() -> float | None:
        """The end time of the oldest checked scrape if it shows the change (None if not, or
        while it is being checked)."""
        while pending and pending[0][1].done():
            end, check = pending.pop(0)
            if check.result():
                return end
        return None

    try:
        while time.perf_counter() < deadline:
            _, body, hdrs = await timed_get(session, metrics_url, headers)
            end = time.perf_counter()

            def check(b=body, h=hdrs) -> bool:
                # A body equal to the one before the change but for its last 64 KiB (the health
                # part, which moves with every watch event, ends the body) does not show it. Only
                # a body whose series moved is decompressed and searched.
                if len(b) > UNCHANGED_TAIL and zlib.crc32(memoryview(b)[:-UNCHANGED_TAIL]) == prev_crc[0]:
                    return False
                return bool(done(decoded(b, h)))
            pending.append((end, asyncio.ensure_future(asyncio.to_thread(check))))
            del body
            if len(pending) >= 2:
                await asyncio.wait([pending[0][1]])
            shown = first_shown()
            if shown is not None:
                return shown - t0
        while pending:
            await asyncio.wait([pending[0][1]])
            shown = first_shown()
            if shown is not None:
                return shown - t0
    finally:
        for _, check in pending:
            await asyncio.wait([check])
    raise TimeoutError(f"change {path}?{key} not shown on /metrics within {deadline_s:.0f} s")


async def churn_battery(session, api, metrics_url, lease: str, n: int, headers=PLAIN) -> tuple[list[float], int]:
    """``n`` sequential scrapes (with ``headers``) while ``lease`` is released and taken again every
    100 ms; returns the scrape times and how many changes were made meanwhile. Each scrape starts
    after a pause drawn from [0, 100 ms) (seeded), so the scrapes span about one change each at a
    random phase to it, instead of a burst that a quick scrape finishes between two changes."""
    stop_churn = asyncio.Event()
    made = 0

    async def churner():
        nonlocal made
        q = urllib.parse.quote(lease, safe="")
        i = 0
        while not stop_churn.is_set():
            if i % 2 == 0:
                url = f"{api}/_change/release?lease={q}"
            else:
                url = f"{api}/_change/lock?lease={q}&id=churn-{i}&who=churn%40laptop"
            async with session.post(url) as r:
                if r.status != 200:
                    raise RuntimeError(f"POST {url}: {r.status} {await r.text()}")
            made += 1
            i += 1
            try:
                await asyncio.wait_for(stop_churn.wait(), 0.1)
            except asyncio.TimeoutError:
                pass

    task = asyncio.create_task(churner())
    pauses = random.Random(n)
    try:
        lat = []
        for _ in range(n):
            await asyncio.sleep(pauses.uniform(0, 0.1))
            lat += await sequential(session, metrics_url, headers, 1)
    finally:
        stop_churn.set()
        await task
    return lat, made


# ------------------------------------------------------------------------------------------------
# One fleet size
# ------------------------------------------------------------------------------------------------

async def run_size(args, n: int, workdir: Path, with_prometheus: bool, binary: str, exporter_path: str,
                   tag: str) -> dict:
    """One run: a fresh fake API of ``n`` objects (so every binary and round starts from the same
    fleet: the change and churn phases edit it), one exporter (``exporter_path``, named ``binary``
    in the tables), every phase. ``tag`` names the log files."""
    mode = Mode(n, args)
    res: dict = {"objects": n, "binary": binary, "mode": mode.name}
    api_port = free_port()
    api = f"http://127.0.0.1:{api_port}"
    api_log = workdir / f"fake_api-{tag}.log"
    fake = start([args.fake_api, "--objects", str(n), "--held-fraction", str(args.held_fraction),
                  "--port", str(api_port)], api_log)
    exporter = prom = None
    session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=mode.http_timeout))
    try:
        async def api_up():
            if fake.poll() is not None:
                raise RuntimeError(f"fake API exited; see {api_log}")
            async with session.get(api + "/_stats") as r:
                return r.status == 200
        t = time.perf_counter()
        await wait_for(api_up, mode.start_timeout, "the fake API to listen", interval=0.02 if n < 100_000 else 0.2)
        res["api_build_s"] = time.perf_counter() - t
        res["api_rss_mib"] = status_kib(fake.pid, "VmRSS") / 1024
        res["api_hwm_mib"] = status_kib(fake.pid, "VmHWM") / 1024
        log(f"{tag}: fake API up in {res['api_build_s']:.1f} s, RSS {res['api_rss_mib']:.0f} MiB "
            f"(peak {res['api_hwm_mib']:.0f} MiB); {mode.name} mode")
        async with session.get(api + "/_info") as r:
            info = json.loads(await r.read())
        res["items"] = info["items"]
        res["api_bytes"] = info["bytes"]
        held = info["held"]
        res["leases"] = info["items"]["leases"]
        res["held"] = len(held)

        # The fake API is not the bottleneck: a plain fetch of the same lists.
        fetches = [await fetch_all_lists(session, api) for _ in range(mode.fetches)]
        res["fetch_n"] = len(fetches)
        res["fetch_s"] = statistics.median(f[0] for f in fetches)
        res["fetch_bytes"] = fetches[0][1]
        res["fetch_requests"] = fetches[0][2]
        async with session.get(api + "/_stats") as r:
            base_stats = json.loads(await r.read())

        kubeconfig = workdir / f"kubeconfig-{n}"
        write_fake_kubeconfig(kubeconfig, api)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        metrics_url = base + "/metrics"
        env = exporter_env()
        ex_log = workdir / f"exporter-{tag}.log"
        t_start = time.perf_counter()
        res["pod_read_rate"] = mode.pod_read_rate or None  # None: the exporter's default
        exporter = start([exporter_path, "--kubeconfig", str(kubeconfig), "--listen-address", f"127.0.0.1:{port}",
                          "--plain-http", "--auth=none", "--log-level", "warn"]
                         + (["--pod-read-rate", str(mode.pod_read_rate)] if mode.pod_read_rate else []), ex_log, env=env)
        pid = exporter.pid

        async def ready():
            if exporter.poll() is not None:
                raise RuntimeError(f"exporter exited with {exporter.returncode}; see {ex_log}")
            async with session.get(base + "/readyz") as r:
                await r.read()
                return r.status == 200
        await wait_for(ready, mode.start_timeout, "the exporter's /readyz to answer 200", interval=0.02)
        t_ready = time.perf_counter()
        res["ready_s"] = t_ready - t_start
        res["ready_cpu_s"] = cpu_seconds(pid)
        res["rss_ready_mib"] = status_kib(pid, "VmRSS") / 1024
        res["hwm_ready_mib"] = status_kib(pid, "VmHWM") / 1024
        async with session.get(api + "/_stats") as r:
            stats_ready = json.loads(await r.read())
        log(f"{tag}: ready in {res['ready_s']:.2f} s, RSS {res['rss_ready_mib']:.0f} MiB")

        # Stale verdicts wait for paced live pod reads (--pod-read-rate); the
        # steady state starts once none is pending (no own_unverified lock).
        async def settled():
            async with session.get(metrics_url, headers=PLAIN) as r:
                body = await r.read()
            # No stale verdict waits for a live pod read (OpenMetrics writes the value as 0.0).
            needle = b'\ncaptf_state_locks_held{class="own_unverified"} '
            k = body.find(needle)
            return k >= 0 and body[k + len(needle):body.find(b"\n", k + len(needle))] in (b"0", b"0.0")
        await wait_for(settled, mode.settle_timeout, "every stale verdict confirmed", interval=mode.settle_interval)
        res["settled_s"] = time.perf_counter() - t_ready
        log(f"{tag}: stale verdicts settled {res['settled_s']:.1f} s after ready")

        async def churn48():
            """Issue 48's churn phases (churn_phases.py), on the fleet as the run left it."""
            ctx = churn_phases.Ctx(session=session, api=api, metrics_url=metrics_url, pid=pid, info=info, args=args,
                                   change_latency=change_latency, metric_line=metric_line, cpu_seconds=cpu_seconds,
                                   log=lambda *a: log(f"{tag}:", *a), deadline_s=mode.change_deadline)
            res["churn48"] = await churn_phases.run(ctx, churn_phases.selected(args))
            res["rss_end_mib"] = status_kib(pid, "VmRSS") / 1024
            if exporter.poll() is not None:
                raise RuntimeError(f"exporter exited with {exporter.returncode}; see {ex_log}")
        if args.churn_only:
            await churn48()
            return res

        seq_n = mode.seq_n
        # In the reduced mode the sequential phases are watched for the peak RSS too (the full
        # mode's peak comes from its concurrent phases; the sampling thread is left out there so
        # its figures stay comparable with the earlier tables).
        seq_watch = (lambda: PeakRss(pid)) if mode.reduced else contextlib.nullcontext

        # One scrape's peak, then sequential scrapes.
        with PeakRss(pid) as one:
            _, body, hdrs = await timed_get(session, metrics_url, PLAIN)
        res["peak_1_mib"] = one.mib
        res["content_type"] = hdrs.get("Content-Type", "")
        res["plain_bytes"] = len(body)
        with seq_watch() as seq_peak:
            seq = await sequential(session, metrics_url, PLAIN, seq_n)
        if seq_peak is not None:
            res["seq_peak_mib"] = seq_peak.mib
        res["seq_n"] = seq_n
        res["seq_p50_ms"] = pct(seq, 50) * 1e3
        res["seq_p99_ms"] = pct(seq, 99) * 1e3

        # gzip: does the server compress when asked?
        _, gz_body, gz_hdrs = await timed_get(session, metrics_url, GZIP)
        res["gzip_served"] = gz_hdrs.get("Content-Encoding", "").lower() == "gzip"
        if res["gzip_served"]:
            res["gzip_bytes"] = len(gz_body)
            text = gzip.decompress(gz_body)
            res["gzip_roundtrip_ok"] = text.startswith(b"#")
            # The served body against the same text (the same generation) compressed whole at
            # once, at zlib's default level 6 (issue 35: at most 1.2x).
            res["gzip_whole6_bytes"] = len(gzip.compress(text, compresslevel=6, mtime=0))
            res["gzip_ratio"] = res["gzip_bytes"] / res["gzip_whole6_bytes"]
            del text
            with seq_watch() as gz_peak:
                gz = await sequential(session, metrics_url, GZIP, seq_n)
            if gz_peak is not None:
                res["gzip_seq_peak_mib"] = gz_peak.mib
            res["gzip_p50_ms"] = pct(gz, 50) * 1e3
            res["gzip_p99_ms"] = pct(gz, 99) * 1e3
        else:
            res["gzip_bytes"] = len(gzip.compress(body, compresslevel=1))

        # The static-bytes anchors: the same bytes from a static handler, same client; for gzip
        # the served gzip body, read with the gzip request headers (the fake API sends it without
        # Content-Encoding, which this client does not decode anyway: the bytes moved are the same).
        async def static_run(data: bytes, headers: dict) -> list[float]:
            async with session.put(api + "/_static", data=data) as r:
                await r.read()
            return await sequential(session, api + "/_static", headers, seq_n)
        static = await static_run(body, PLAIN)
        res["static_p50_ms"] = pct(static, 50) * 1e3
        res["static_p99_ms"] = pct(static, 99) * 1e3
        res["ratio_p99"] = res["seq_p99_ms"] / res["static_p99_ms"]
        if res["gzip_served"]:
            static_gz = await static_run(gz_body, GZIP)
            res["static_gzip_p50_ms"] = pct(static_gz, 50) * 1e3
            res["static_gzip_p99_ms"] = pct(static_gz, 99) * 1e3
        del body, gz_body

        # 10 concurrent scrapers (not in the reduced mode).
        if mode.c10:
            with PeakRss(pid) as ten:
                conc = await concurrent(metrics_url, PLAIN, 10, mode.each)
            res["c10_n"] = len(conc)
            res["c10_p50_ms"] = pct(conc, 50) * 1e3
            res["c10_p99_ms"] = pct(conc, 99) * 1e3
            res["c10_peak_mib"] = ten.mib

        # 16 concurrent scrapes at once vs one (4 in the reduced mode, bodies dropped as read).
        with PeakRss(pid) as one_again:
            await timed_get(session, metrics_url, PLAIN, keep=not mode.reduced)
        with PeakRss(pid) as sixteen:
            await concurrent(metrics_url, PLAIN, mode.at_once, 1, keep=not mode.reduced, timeout=mode.http_timeout)
        res["peak_1_mib"] = max(res["peak_1_mib"], one_again.mib)
        res["c16_n"] = mode.at_once
        res["c16_peak_mib"] = sixteen.mib
        res["rss_after_scrapes_mib"] = status_kib(pid, "VmRSS") / 1024
        res["hwm_mib"] = status_kib(pid, "VmHWM") / 1024  # since the last reset, see the README

        # Steady state: no scrapes for --idle-seconds (default 60: the exporter's watches ask the
        # server to close them after 60 s, so a shorter window would see a restart or none); CPU
        # and API requests over that window. It starts at least 10 s after ready (past the first
        # live pod reads).
        async def after_warmup():
            return time.perf_counter() >= t_ready + 10
        await wait_for(after_warmup, 15, "10 s after ready", interval=0.1)
        async with session.get(api + "/_stats") as r:
            stats_1 = json.loads(await r.read())
        t1 = time.perf_counter()
        c1 = cpu_seconds(pid)
        idle_until = t1 + args.idle_seconds

        async def idle_over():
            return time.perf_counter() >= idle_until
        await wait_for(idle_over, args.idle_seconds + 5, "the idle window", interval=0.2)
        c2 = cpu_seconds(pid)
        t2 = time.perf_counter()
        async with session.get(api + "/_stats") as r:
            stats_2 = json.loads(await r.read())
        res["idle_window_s"] = t2 - t1
        res["idle_cpu_pct"] = (c2 - c1) / (t2 - t1) * 100
        res["rss_rest_mib"] = status_kib(pid, "VmRSS") / 1024  # "RSS at rest": after the quiet window

        def req(stats, verb=None, what=None):
            out = 0
            for v, per in stats["requests"].items():
                if v == "list_start" or (verb and v != verb):
                    continue
                out += sum(c for w, c in per.items() if what is None or w == what)
            return out
        res["req_per_min"] = (req(stats_2) - req(stats_1)) / (t2 - t1) * 60
        res["req_breakdown_window"] = {v: {w: c - stats_1["requests"].get(v, {}).get(w, 0) for w, c in per.items()}
                                       for v, per in stats_2["requests"].items()}
        res["pod_gets_first_10s"] = req(stats_1, "get") - req(base_stats, "get")
        res["pod_gets_total"] = req(stats_2, "get") - req(base_stats, "get")
        res["pod_gets_404"] = sum(stats_2.get("get_not_found", {}).values()) - \
            sum(base_stats.get("get_not_found", {}).values())
        res["lists_to_ready"] = req(stats_ready, "list") - req(base_stats, "list")

        # Change to metric, plain and (when served) gzip, each on locks of its own: release held
        # locks (two workstations, one gone own pod), and a runner pod turning Failed (the lock's
        # class becomes own_stale).
        def held_metric(h, value: bytes):
            # A released lock's object with nothing else to tell leaves the body (the default
            # exposition): no line is a release too.
            def check(body):
                line = metric_line(body, "captf_state_lock_held", h["namespace"], h["name"])
                if line is None:
                    return value == b"0"
                return line.rsplit(b" ", 1)[-1] in (value, value + b".0")
            return check

        def of_class(h, cls: str):
            def check(body):
                line = metric_line(body, "captf_state_lock_acquired_timestamp_seconds", h["namespace"], h["name"])
                return line is not None and f'class="{cls}"'.encode() in line
            return check

        def holders(kind: str) -> list[dict]:
            return [h for h in held if h["holder"] == kind]
        encodings = [("", PLAIN)] + ([("gzip_", GZIP)] if res["gzip_served"] else [])
        for i, (pre, headers) in enumerate(encodings):
            picks = holders("workstation")[2 * i:2 * i + 2] + holders("own_pod_gone")[i:i + 1]
            lat = []
            for h in picks[:args.changes]:
                lat.append(await change_latency(session, api, metrics_url, "/_change/release",
                                                "lease=" + urllib.parse.quote(h["lease"], safe=""),
                                                held_metric(h, b"1"), held_metric(h, b"0"), headers,
                                                mode.change_deadline))
            res[pre + "release_ms"] = [x * 1e3 for x in lat]
            res[pre + "release_median_ms"] = statistics.median(lat) * 1e3 if lat else None
            lat = []
            for h in holders("own_pod_alive")[i * args.changes:(i + 1) * args.changes]:
                lat.append(await change_latency(session, api, metrics_url, "/_change/pod-failed",
                                                "pod=" + urllib.parse.quote(h["pod"], safe=""),
                                                of_class(h, "own_live"), of_class(h, "own_stale"), headers,
                                                mode.change_deadline))
            res[pre + "pod_failed_ms"] = [x * 1e3 for x in lat]
            res[pre + "pod_failed_median_ms"] = statistics.median(lat) * 1e3 if lat else None
            all_changes = res[pre + "release_ms"] + res[pre + "pod_failed_ms"]
            res[pre + "change_p99_ms"] = pct(all_changes, 99) if all_changes else None

        # The churn battery: the same sequential scrapes while one lock is released and taken
        # again every 100 ms (issue 17: a scrape must not wait on the render a change causes),
        # plain and gzip, each on a workstation lock the change-to-metric picks above left alone.
        spare = holders("workstation")[4:] or held[-2:]
        for i, (pre, headers) in enumerate(encodings):
            lease = spare[min(i, len(spare) - 1)]["lease"]
            churn, churn_changes = await churn_battery(session, api, metrics_url, lease, seq_n, headers)
            res[pre + "churn_n"] = len(churn)
            res[pre + "churn_changes"] = churn_changes
            res[pre + "churn_p50_ms"] = pct(churn, 50) * 1e3
            res[pre + "churn_p99_ms"] = pct(churn, 99) * 1e3
        res["scrape_after_changes_ms"] = (await timed_get(session, metrics_url, PLAIN))[0] * 1e3
        if churn_phases.selected(args):
            await churn48()

        if with_prometheus:
            try:
                res["prometheus"] = await prometheus_run(args, port, workdir)
            except (TimeoutError, RuntimeError) as e:
                # Printed under the table instead of losing the run (at 1M a 600 MB scrape can
                # outlast Prometheus's 10 s scrape_timeout).
                res["prometheus"] = {"error": str(e)}
        res["rss_end_mib"] = status_kib(pid, "VmRSS") / 1024
        if exporter.poll() is not None:
            raise RuntimeError(f"exporter exited with {exporter.returncode}; see {ex_log}")
        return res
    finally:
        await session.close()
        stop(prom)
        stop(exporter)
        stop(fake)


async def prometheus_run(args, port: int, workdir: Path) -> dict:
    binary = shutil.which("prometheus")
    if not binary:
        return {"error": "prometheus not installed"}
    pdir = workdir / "prometheus"
    shutil.rmtree(pdir, ignore_errors=True)
    pdir.mkdir()
    cfg = pdir / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\n  scrape_timeout: 10s\n"
                   "scrape_configs:\n- job_name: captf\n  static_configs:\n"
                   f"  - targets: ['127.0.0.1:{port}']\n")
    pport = free_port()
    papi = f"http://127.0.0.1:{pport}"
    p = start([binary, f"--config.file={cfg}", f"--storage.tsdb.path={pdir / 'data'}",
               f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"], workdir / "prometheus.log")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            async def query(expr):
                async with s.get(papi + "/api/v1/query", params={"query": expr}) as r:
                    return (await r.json())["data"]["result"]

            async def two_scrapes():
                if p.poll() is not None:
                    raise RuntimeError("prometheus exited; see prometheus.log")
                r = await query('count_over_time(scrape_duration_seconds{job="captf"}[10m])')
                return r and float(r[0]["value"][1]) >= 2
            await wait_for(two_scrapes, 120, "Prometheus to scrape the exporter twice", interval=0.5)
            out = {}
            for m in ("scrape_duration_seconds", "scrape_samples_scraped", "up"):
                r = await query(f'{m}{{job="captf"}}[10m]')
                out[m] = [float(v) for _, v in r[0]["values"]] if r else []
            return out
    finally:
        stop(p)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--exporter", required=True, action="append", metavar="[NAME=]PATH",
                    help="the exporter binary; give it several times (e.g. old=PATH new=PATH) to run each "
                         "in turn per size and round, with a side-by-side table of the issue-35 figures")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every binary per size, alternating binaries (old, new, old, new, ...)")
    ap.add_argument("--fake-api", required=True)
    ap.add_argument("--held-fraction", type=float, default=0.1)
    ap.add_argument("--scrapes", type=int, default=0,
                    help="sequential scrapes (default 100; 50 from 50k objects; 5 in the reduced mode)")
    ap.add_argument("--reduced-from", type=int, default=500_000, metavar="N",
                    help="objects from which a run is in the reduced mode (few scrapes, no 10 concurrent "
                         "scrapers, 4 at once instead of 16, one list fetch, longer deadlines); 0: never")
    ap.add_argument("--pod-read-rate", type=int, default=0, metavar="N",
                    help=f"--pod-read-rate for the exporter at every size (default: the exporter's own "
                         f"default, {REDUCED_POD_READ_RATE}/s in the reduced mode)")
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--changes", type=int, default=3, help="changes per kind for change-to-metric")
    ap.add_argument("--prometheus", choices=["yes", "no"], default="yes",
                    help="feed the largest size's exposition to a real Prometheus")
    churn_phases.add_arguments(ap)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    churn_phases.selected(args)  # an unknown phase fails here, not after the first fleet is built
    if args.churn_only and not churn_phases.selected(args):
        ap.error("--churn-only needs --churn-phases")
    exporters = []
    for spec in args.exporter:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name:
            name, path = (Path(spec).name if len(args.exporter) > 1 else "exporter"), spec
        exporters.append((name, path))
    if len({name for name, _ in exporters}) != len(exporters):
        ap.error("--exporter: give each binary its own NAME (NAME=PATH)")
    stop_all_on_signals()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="captf-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"logs in {workdir}")
    results = []
    load_before = os.getloadavg()
    t_begin = time.perf_counter()
    try:
        for n in args.sizes:
            last = n == max(args.sizes)
            for rnd in range(args.rounds):
                for name, path in exporters:
                    tag = f"{n}" + (f"-{name}" if len(exporters) > 1 else "") + (f"-r{rnd + 1}" if args.rounds > 1 else "")
                    results.append(await run_size(args, n, workdir, args.prometheus == "yes" and last and rnd == 0,
                                                  name, path, tag))
    finally:
        stop_all()
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    reduced = [fleet_label(n) for n in sorted({r["objects"] for r in results if r["mode"] == "reduced"})]
    print(f"\n## Benchmark ({when}; {os.cpu_count()} cores, {platform.machine()}, "
          f"held fraction {args.held_fraction}; load average {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after; wall time {time.perf_counter() - t_begin:.0f} s)\n")
    if reduced:
        print(f"Reduced mode at {', '.join(reduced)} (from {fleet_label(args.reduced_from)} objects): "
              f"{REDUCED_SUMMARY}\n")
    full = [r for r in results if "seq_p50_ms" in r]  # not the --churn-only runs
    if full:
        print(table(full))
        print()
        print(details(full))
        print()
        print(figures(full))
    churn = churn_phases.report(results)
    if churn:
        print()
        print(churn)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
