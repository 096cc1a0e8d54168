#!/usr/bin/env python3
"""Slow clients against the real exporter binary: can anyone who reaches the port keep a scrape out?

Starts the fake API (examples/fake_api, ``--objects`` objects) and the exporter, measures the idle
RSS and a baseline scrape, then opens ``--clients`` connections that send ``GET /metrics`` and never
read (receive buffer 4 KiB), and, over TLS, as many again that connect and never finish the TLS
handshake (half a ClientHello, then nothing). With ``--chatty N``, also N keep-alive clients that each
ask for ``/healthz`` every 0.8 s and read the answer (reconnecting when closed). With all of them
open it times real scrapes and reads the exporter's RSS. Prints one JSON object and a line per figure; exits 1 when a target is missed:

  * every real scrape answered within ``--max-scrape-s`` (2 s), whole;
  * RSS at most ``--max-rss-ratio`` (1.5) times the idle RSS.

Run for plain HTTP and for HTTPS (``--tls``). Used by scripts/test.sh (stage ``bench``) and by hand:

    python3 tools/bench/slow_clients.py --exporter target/release/captf-lock-exporter \
        --fake-api target/release/examples/fake_api --objects 10000 [--tls] [--no-assert]

Waits poll a condition against a deadline; the only fixed pause is the settle time after the slow
clients are connected, which is what is being measured (time passing with them open).
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the shared procs module
from procs import exporter_env, free_port, start, stop_all, write_fake_kubeconfig  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def fetch(url: str, timeout: float) -> tuple[int, int]:
    """GET ``url`` whole: (status, body bytes)."""
    req = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
    with urllib.request.urlopen(req, timeout=timeout, context=context() if url.startswith("https") else None) as r:
        return r.status, len(r.read())


def never_reads(port: int, tls: bool) -> socket.socket:
    """Sends GET /metrics and never reads the answer."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(10)
    raw.connect(("127.0.0.1", port))
    s: socket.socket = context().wrap_socket(raw) if tls else raw
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
    return s


def never_handshakes(port: int) -> socket.socket:
    """Connects and sends the first bytes of a TLS record, then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x16\x03\x01\x02\x00\x01")
    return s


def chatty(port: int, tls: bool, stop: threading.Event, counts: dict) -> None:
    """Asks for /healthz every 0.8 s on one keep-alive connection; reconnects when closed."""
    s = None
    while not stop.is_set():
        try:
            if s is None:
                raw = socket.create_connection(("127.0.0.1", port), timeout=30)
                s = context().wrap_socket(raw) if tls else raw
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                buf += chunk
            head, _, body = buf.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                body += chunk
            counts["answers"] += 1
        except (OSError, ValueError):
            counts["reconnects"] += 1
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
            s = None
            continue
        stop.wait(0.8)
    if s is not None:
        s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exporter", required=True)
    ap.add_argument("--fake-api", required=True)
    ap.add_argument("--objects", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=300)
    ap.add_argument("--chatty", type=int, default=0,
                    help="keep-alive clients that ask for /healthz every 0.8 s (issue 33: 128 held every slot)")
    ap.add_argument("--scrapes", type=int, default=5)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--tls", action="store_true", help="HTTPS (self-signed) and, besides, clients that never handshake")
    ap.add_argument("--max-scrape-s", type=float, default=2.0)
    ap.add_argument("--max-rss-ratio", type=float, default=1.5)
    ap.add_argument("--no-assert", action="store_true", help="print the figures only (to measure an old binary)")
    ap.add_argument("--legacy", action="store_true",
                    help="a binary from before --plain-http/--auth existed (plain HTTP, no flags)")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="slow-clients-"))
    workdir.mkdir(parents=True, exist_ok=True)

    api_port = free_port()
    fake = start([args.fake_api, "--objects", str(args.objects), "--port", str(api_port)], workdir / "fake_api.log")
    sockets: list[socket.socket] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        wait_for(lambda: urllib.request.urlopen(f"http://127.0.0.1:{api_port}/_stats", timeout=2).status == 200,
                 600, "the fake API")
        kubeconfig = workdir / "kubeconfig"
        write_fake_kubeconfig(kubeconfig, f"http://127.0.0.1:{api_port}")
        port = free_port()
        endpoint = [] if args.legacy else ["--auth=none"] if args.tls else ["--plain-http", "--auth=none"]
        env = exporter_env()
        exporter = start([args.exporter, "--kubeconfig", str(kubeconfig), "--listen-address", f"127.0.0.1:{port}",
                          *endpoint, "--log-level", "warn"], workdir / "exporter.log", env=env)
        scheme = "https" if args.tls else "http"
        url = f"{scheme}://127.0.0.1:{port}"
        wait_for(lambda: fetch(url + "/readyz", 2)[0] == 200, 300, "the exporter to be ready")
        status, body = fetch(url + "/metrics", 30)
        assert status == 200
        # Idle, after one scrape has made the body: the figure the target is relative to.
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.1)
        idle = rss_kib(exporter.pid)

        opened = {"never_read": 0, "never_handshake": 0, "refused": 0}
        for _ in range(args.clients):
            try:
                sockets.append(never_reads(port, args.tls))
                opened["never_read"] += 1
            except OSError:
                opened["refused"] += 1
        if args.tls:
            for _ in range(args.clients):
                try:
                    sockets.append(never_handshakes(port))
                    opened["never_handshake"] += 1
                except OSError:
                    opened["refused"] += 1
        chat = {"answers": 0, "reconnects": 0}
        for _ in range(args.chatty):
            t = threading.Thread(target=chatty, args=(port, args.tls, stop, chat), daemon=True)
            t.start()
            threads.append(t)
        settle_until = time.monotonic() + args.settle_s
        while time.monotonic() < settle_until:
            time.sleep(0.1)
        times, failures = [], []
        for _ in range(args.scrapes):
            t = time.monotonic()
            try:
                st, n = fetch(url + "/metrics", 30)
                times.append(time.monotonic() - t)
                # Whole: urllib raises on a body shorter than its Content-Length. The size may
                # differ a little from the first scrape (timestamps, counters move).
                if st != 200 or n < body * 0.9:
                    failures.append(f"status {st}, {n} bytes (first scrape {body})")
            except OSError as e:
                times.append(time.monotonic() - t)
                failures.append(f"{type(e).__name__}: {e}")
        loaded = rss_kib(exporter.pid)
        result = {
            "tls": args.tls, "objects": args.objects, "body_bytes": body, "opened": opened,
            "chatty": args.chatty, "chatty_counts": dict(chat),
            "scrape_s": [round(x, 3) for x in times], "max_scrape_s": round(max(times), 3),
            "idle_rss_MiB": round(idle / 1024, 1), "loaded_rss_MiB": round(loaded / 1024, 1),
            "rss_ratio": round(loaded / idle, 2) if idle else None, "failures": failures,
        }
        print(json.dumps(result))
        print(f"slow clients ({'https' if args.tls else 'http'}): {opened}, chatty {args.chatty} {chat}; real scrapes took "
              f"{', '.join(f'{x:.3f}' for x in times)} s (max {max(times):.3f}); RSS {idle / 1024:.1f} -> "
              f"{loaded / 1024:.1f} MiB ({result['rss_ratio']}x)")
        if args.no_assert:
            return 0
        ok = not failures and max(times) <= args.max_scrape_s and loaded <= args.max_rss_ratio * idle
        print("verdict:", "PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass
        stop_all()



if __name__ == "__main__":
    sys.exit(main())
