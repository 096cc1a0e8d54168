#!/usr/bin/env python3
"""Where the exporter's time goes, phase by phase (issue 44): one `perf record` of its whole life
against the fake API, cut into phases by time, each reported as the functions that took the most
samples (self and with children).

  tools/bench/profile.sh 100000            # builds a frame-pointer release binary, then runs this

Phases (CLOCK_MONOTONIC, the clock perf is told to stamp samples with):

- start: exporter start to the first /readyz 200 (the watch-lists, decoding, the index);
- first scrape: the first /metrics, which starts the renderer (the whole store);
- scrapes: 20 plain and 20 gzip scrapes back to back, no change;
- churn: 20 s of one lock released and taken again every 100 ms, a gzip scrape every 0.5 s
  (what a change costs: the index, the re-render, the snapshot).

Only the standard library and aiohttp; the processes are stopped by PID (tools/procs.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from procs import exporter_env, free_port, start, stop, stop_all, write_fake_kubeconfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import GZIP, PLAIN, wait_for  # noqa: E402


def log(*a: object) -> None:
    print("[profile]", *a, file=sys.stderr, flush=True)


async def run(args) -> dict[str, tuple[float, float]]:
    wd = Path(args.workdir)
    api_port = free_port()
    api = f"http://127.0.0.1:{api_port}"
    fake = start([args.fake_api, "--objects", str(args.objects), "--held-fraction", "0.1",
                  "--port", str(api_port)], wd / "fake_api.log")
    session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=600))
    perf = None
    phases: dict[str, tuple[float, float]] = {}
    try:
        async def api_up():
            async with session.get(api + "/_stats") as r:
                return r.status == 200
        await wait_for(api_up, 900, "the fake API")
        async with session.get(api + "/_info") as r:
            held = json.loads(await r.read())["held"]
        kc = wd / "kubeconfig"
        write_fake_kubeconfig(kc, api)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = exporter_env()
        t0 = time.monotonic()
        perf = start(["perf", "record", "-k", "CLOCK_MONOTONIC", "-F", str(args.freq), "-g",
                      "-o", str(wd / "perf.data"), "--",
                      args.exporter, "--kubeconfig", str(kc), "--listen-address", f"127.0.0.1:{port}",
                      "--plain-http", "--auth=none", "--log-level", "warn"], wd / "exporter.log", env=env)

        async def ready():
            async with session.get(base + "/readyz") as r:
                await r.read()
                return r.status == 200
        await wait_for(ready, 900, "/readyz", interval=0.01)
        t1 = time.monotonic()
        phases["start"] = (t0, t1)
        log(f"ready in {t1 - t0:.2f} s")
        async with session.get(base + "/metrics", headers=PLAIN) as r:
            await r.read()
        t2 = time.monotonic()
        phases["first scrape"] = (t1, t2)
        log(f"first scrape {t2 - t1:.2f} s")

        async def settled():
            async with session.get(base + "/metrics", headers=GZIP) as r:
                import gzip
                body = gzip.decompress(await r.read())
            return b'captf_state_locks_held{class="own_unverified"} 0' in body
        await wait_for(settled, 1800, "stale verdicts settled", interval=1)
        t3 = time.monotonic()
        for headers in (PLAIN, GZIP):
            for _ in range(20):
                async with session.get(base + "/metrics", headers=headers) as r:
                    await r.read()
        t4 = time.monotonic()
        phases["scrapes"] = (t3, t4)
        log(f"40 scrapes in {t4 - t3:.2f} s")

        lease = urllib.parse.quote([h for h in held if h["holder"] == "workstation"][0]["lease"], safe="")
        stop_at = time.monotonic() + args.churn_seconds
        i = 0

        async def scraper():
            while time.monotonic() < stop_at:
                async with session.get(base + "/metrics", headers=GZIP) as r:
                    await r.read()
                await asyncio.sleep(0.5)
        task = asyncio.create_task(scraper())
        t5 = time.monotonic()
        while time.monotonic() < stop_at:
            url = (f"{api}/_change/release?lease={lease}" if i % 2 == 0 else
                   f"{api}/_change/lock?lease={lease}&id=p-{i}&who=p%40laptop")
            async with session.post(url) as r:
                await r.read()
            i += 1
            await asyncio.sleep(0.1)
        await task
        t6 = time.monotonic()
        phases["churn"] = (t5, t6)
        log(f"churn: {i} changes in {t6 - t5:.1f} s")
    finally:
        await session.close()
        if perf is not None and perf.poll() is None:
            # perf forwards SIGINT to the exporter and writes its file once both end.
            os.kill(perf.pid, signal.SIGINT)
            try:
                perf.wait(120)
            except subprocess.TimeoutExpired:
                pass
        stop(perf)
        stop(fake)
        stop_all()
    return phases


def report(wd: Path, phases: dict[str, tuple[float, float]], top: int, freq: int) -> None:
    for name, (a, b) in phases.items():
        window = f"{a:.6f},{b:.6f}"
        samples = subprocess.run(["perf", "script", "-i", str(wd / "perf.data"), "--time", window, "-F", "tid"],
                                 capture_output=True, text=True).stdout.count("\n")
        print(f"\n## {name}: {b - a:.2f} s wall, {samples / freq:.2f} CPU s ({samples} samples; "
              f"perf time {window})\n")
        for children in (False, True):
            cmd = ["perf", "report", "-i", str(wd / "perf.data"), "--stdio", "--time", f"{a:.6f},{b:.6f}",
                   "--sort", "symbol", "--percent-limit", "1.5", "-g", "none",
                   "--children" if children else "--no-children"]
            out = subprocess.run(cmd, capture_output=True, text=True).stdout
            lines = [line for line in out.splitlines() if line.strip() and not line.startswith("#")]
            print("with children:" if children else "self:")
            print("```")
            print("\n".join(lines[:top]))
            print("```")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("objects", type=int)
    ap.add_argument("--exporter", required=True)
    ap.add_argument("--fake-api", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--freq", type=int, default=499)
    ap.add_argument("--churn-seconds", type=float, default=20)
    ap.add_argument("--top", type=int, default=18)
    args = ap.parse_args()
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: (stop_all(), sys.exit(143)))
    phases = asyncio.run(run(args))
    report(Path(args.workdir), phases, args.top, args.freq)
    return 0


if __name__ == "__main__":
    sys.exit(main())
