#!/usr/bin/env python3
"""The exporter's time to ready against kube-apiserver's own floor, in one run, served as the
Helm chart serves it by default, for several exporter binaries side by side (old vs new).

One run: a real control plane (tests/pykit/controlplane.py: etcd + kube-apiserver built by
tools/kube/build.sh), CAPTF's CRDs, the fleet of tools/bench/ksm_compare.py (``--leases`` N lock
Leases, ``--held`` of them held by workstations, one TerraformMachine each), the API server's
watch caches warmed as ksm_compare.py does. Then:

  RBAC   the chart rendered by the real Helm engine with its default values (tests/pykit/chart.py):
         its ServiceAccount captf-system/captf-lock-exporter, its read ClusterRole and its
         auth-delegator ClusterRole (create tokenreviews, subjectaccessreviews), applied; a scraper
         ServiceAccount monitoring/prometheus bound to the chart's metrics-reader ClusterRole (get on
         the non-resource URL /metrics), as ``metricsReader.serviceAccounts`` does. Both tokens come
         from the TokenRequest API; the scraper's is checked with a TokenReview and a
         SubjectAccessReview before anything is measured.
  starts ``--starts`` rounds; in each, every ``--exporter NAME=PATH`` once, in turn, the order
         reversed every other round (old, new | new, old | ...), each start (and each floor
         request) after a full garbage collection in kube-apiserver (``--server-gc``, through
         ``/debug/pprof/heap?gc=1``, so kube-apiserver runs with ``--profiling=true``) and once it
         has gone quiet (at most 0.02 CPU s over 0.3 s: the previous one's aftermath done). The binary (copied to the work directory first) runs with the
         arguments the chart's Deployment gets by default (HTTPS with the exporter's self-signed
         certificate, ``--auth=kubernetes``, ``--log-format=json --log-level=info``),
         ``--listen-address`` moved to 127.0.0.1 and a free port, plus ``--kubeconfig`` with the
         ServiceAccount's token.
         Polled every ``--poll`` s (20 ms) over HTTPS (certificate not verified, as the kubelet's
         probes): ready = ``/readyz`` 200 and then a ``GET /metrics`` with the scraper's bearer
         token (Prometheus' Accept header, ``Accept-Encoding: gzip``) answering 200 with every lock
         (N ``captf_state_lock_held`` series summing to the held count). Recorded: process start
         to the last byte of that first complete answer, the exporter's CPU (utime+stime) by then,
         kube-apiserver's CPU over the same span, when /readyz first said 200, how long the first
         /metrics GET took (a new TLS connection, the TokenReview and SubjectAccessReview, the
         first gzip body) and one more right after on the same connection, the exporter's API
         requests by then with when the API server received each (audit log), and the exporter's
         own log lines with their time since the start. Stopped by PID.
  floor  before every round and after the last, on the same control plane: stream_cost.py's
         "both, both listed" pair (the Leases' protobuf LIST beside the TerraformMachines' JSON
         LIST, at once, as the admin, TLS handshakes done first, each body read to its end and
         discarded), and beside it, for context, what the exporter asks (the Leases' protobuf
         watch-list beside the TerraformMachines' JSON watch-list).

Prints a Markdown table: per binary ready median / min / max, CPU, the ratio median ready /
median floor; the floor's median / min / max. ``--json PATH`` writes everything. Every wait polls a
condition against a deadline; every process started here is stopped by its PID, also on failure
and on SIGINT/SIGTERM.

Needs the Python packages of tests/requirements.txt (requests, PyYAML, cryptography,
helm-python-sdk).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import os
import platform
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT / "tests")]

import ksm_compare as kc  # noqa: E402
import stream_cost as sc  # noqa: E402
from procs import exporter_env, free_port, start, stop, stop_all  # noqa: E402


def log(*a: object) -> None:
    print(f"[ready-floor {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


SCRAPER_NS, SCRAPER_SA = "monitoring", "prometheus"


def chart_setup(cp: Any, workdir: Path) -> dict[str, Any]:
    """The chart's RBAC applied (default values, rendered by Helm), and the exporter's arguments
    from its Deployment. Returns the identities, tokens and arguments."""
    from pykit.chart import RELEASE_NS, install_chart, metrics_reader_token, render_chart

    install = install_chart(cp.kube, {})
    (dep,) = [o for o in render_chart({}) if o["kind"] == "Deployment"]
    chart_args = list(dep["spec"]["template"]["spec"]["containers"][0]["args"])
    # 4 h tokens (the helpers' are 2 h): a 100k run creates its fleet first
    exp_token = cp.kube.token(RELEASE_NS, install.sa, seconds=4 * 3600)
    exp_kc = cp.kubeconfig(workdir / "kubeconfig-exporter", exp_token, user=install.sa)
    metrics_reader_token(cp.kube, install, SCRAPER_NS, SCRAPER_SA)
    scrape_token = cp.kube.token(SCRAPER_NS, SCRAPER_SA, seconds=4 * 3600)
    scrape_user = f"system:serviceaccount:{SCRAPER_NS}:{SCRAPER_SA}"

    # the API server accepts the scraper's token and lets it read /metrics (what the exporter
    # will ask it), so a refusal later is the exporter's
    tr = cp.kube.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", json={
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": scrape_token}}).json()
    st = tr.get("status", {})
    if not st.get("authenticated") or st.get("user", {}).get("username") != scrape_user:
        raise RuntimeError(f"TokenReview does not accept the scraper's token: {st}")
    sar = cp.kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", json={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": scrape_user, "groups": st["user"].get("groups", []),
                 "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}}).json()
    if not sar.get("status", {}).get("allowed"):
        raise RuntimeError(f"the scraper may not get /metrics: {sar.get('status')}")
    return {"install": install, "chart_args": chart_args, "exp_kc": exp_kc, "exp_user": install.user,
            "scrape_token": scrape_token, "scrape_user": scrape_user}


def exporter_argv(binary: Path, chart_args: list[str], kubeconfig: Path, port: int) -> list[str]:
    """The chart's default arguments, --listen-address moved to loopback and a free port."""
    argv = [str(binary)]
    for a in chart_args:
        if a.startswith("--listen-address="):
            a = f"--listen-address=127.0.0.1:{port}"
        argv.append(a)
    if "--plain-http" in argv or "--auth=kubernetes" not in argv:
        raise RuntimeError(f"the chart's defaults are no longer HTTPS with --auth=kubernetes: {chart_args}")
    return [*argv, "--kubeconfig", str(kubeconfig)]


def log_timeline(path: Path, t0_unix: float, limit: int = 15) -> list[str]:
    """The exporter's JSON log lines of one start, each as "+S.SSS s LEVEL message {fields}", the
    time counted from the process start; a message logged again (one per overdue lock) is shown
    once, its first time and fields, with the count."""
    out: list[str] = []
    index: dict[tuple[str, str], int] = {}
    counts: list[int] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        ts = ev.get("timestamp") or ev.get("time") or ev.get("ts")
        fields = dict(ev.get("fields") or {})
        msg = fields.pop("message", None) or ev.get("message") or ev.get("msg") or ""
        when = "?"
        if isinstance(ts, str):
            try:
                when = f"+{dt.datetime.fromisoformat(ts.replace('Z', '+00:00')).timestamp() - t0_unix:.3f} s"
            except ValueError:
                pass
        extra = {k: v for k, v in {**fields, **{k: v for k, v in ev.items()
                                                  if k not in ("timestamp", "time", "ts", "fields", "message",
                                                               "msg", "target", "level", "threadId",
                                                               "threadName", "span", "spans")}}.items()}
        key = (str(ev.get("level", "")), str(msg))
        if key in index:
            counts[index[key]] += 1
            continue
        if len(out) >= limit:
            continue
        index[key] = len(out)
        counts.append(1)
        out.append(f"{when} {key[0]} {msg}" + (f" {json.dumps(extra, default=str)}" if extra else ""))
    return [line + (f" (x{n})" if n > 1 else "") for line, n in zip(out, counts)]


def api_timeline(path: Path, offset: int, user: str, t0_unix: float) -> list[dict[str, Any]]:
    """The requests of ``user`` in the audit log past ``offset``, in the order received: verb,
    resource, received (s since the process start), and for a request that completed, how long
    the API server took (its ResponseComplete stage's timestamp)."""
    by_id: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            if user.encode() not in raw:
                continue
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if ev.get("user", {}).get("username") != user:
                continue
            r = by_id.setdefault(ev["auditID"], {
                "verb": ev["verb"], "resource": (ev.get("objectRef") or {}).get("resource", ev.get("requestURI")),
                "received_s": round(kc.audit_ts(ev["requestReceivedTimestamp"]) - t0_unix, 4)})
            if ev.get("stage") == "ResponseComplete" and ev["verb"] != "watch":
                r["took_ms"] = round((kc.audit_ts(ev["stageTimestamp"])
                                      - kc.audit_ts(ev["requestReceivedTimestamp"])) * 1000, 1)
    return sorted(by_id.values(), key=lambda r: r["received_s"])


def one_start(name: str, binary: Path, n_start: int, *, cp: Any, setup: dict[str, Any], args: argparse.Namespace,
              workdir: Path, env: dict[str, str], tls: ssl.SSLContext) -> dict[str, Any]:
    port = free_port()
    logf = workdir / f"exporter-{name}-{n_start}.log"
    argv = exporter_argv(binary, setup["chart_args"], setup["exp_kc"], port)
    api_pid = cp.apiserver.pid
    quiet_s = settle(cp, args.server_gc == "yes")
    m0 = kc.mark(cp)
    api_cpu0, etcd_cpu0, own0, ticks0 = (kc.cpu_seconds(api_pid), kc.cpu_seconds(cp.etcd.pid), time.process_time(),
                                         kc.machine_ticks())
    t0_unix, t0 = time.time(), time.monotonic()
    p = start(argv, logf, env=env)
    readyz = kc.Scraper(port, tls=tls)
    metrics = kc.Scraper(port, tls=tls, headers={"Authorization": f"Bearer {setup['scrape_token']}"})
    seen: dict[str, Any] = {"readyz_200_s": None, "metrics_statuses": {}, "metrics_get_s": []}
    try:
        def ready() -> bool:
            _, status, _, _ = readyz.get("/readyz", "*/*", "identity")
            if status != 200:
                return False
            if seen["readyz_200_s"] is None:
                seen["readyz_200_s"] = round(readyz.answered_at - t0, 3)
            secs, status, body, h = metrics.get("/metrics", kc.PROM_ACCEPT, args.encoding)
            seen["metrics_get_s"].append(round(secs, 4))
            seen["metrics_statuses"][status] = seen["metrics_statuses"].get(status, 0) + 1
            if status in (401, 403):
                raise RuntimeError(f"{name}: /metrics answered {status} to the scraper's token: {body[:300]!r}")
            if status != 200:
                return False
            if h.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            return kc.exporter_complete(body, args.leases, args.held)
        kc.wait_for(ready, args.ready_timeout, f"{name} ready", interval=args.poll, alive=p)
        ready_s = metrics.answered_at - t0
        cpu = kc.cpu_seconds(p.pid)
        api_cpu = kc.cpu_seconds(api_pid) - api_cpu0
        # the machine's busy CPU over the start, less the exporter's, the control plane's and this
        # script's: what other work on the machine took meanwhile
        ticks1 = kc.machine_ticks()
        others = ((ticks1[0] - ticks0[0]) / kc.CLK_TCK - cpu - api_cpu
                  - (kc.cpu_seconds(cp.etcd.pid) - etcd_cpu0) - (time.process_time() - own0))
        rss = kc.status_kib(p.pid, "VmRSS") / 1024
        # once more on the same connection (no handshake, the review answers and the gzip body
        # cached): what the first answer paid on top is the start's share of it
        again_s, again_status, _, _ = metrics.get("/metrics", kc.PROM_ACCEPT, args.encoding)
        if again_status != 200:
            raise RuntimeError(f"{name}: the second /metrics answered {again_status}")
    finally:
        readyz.close()
        metrics.close()
        stop(p)
    r = {"ready_s": round(ready_s, 3), "cpu_s": round(cpu, 2), "apiserver_cpu_s": round(api_cpu, 2),
         "others_cpu_s": round(max(0.0, others), 2),
         "rss_ready_MiB": round(rss, 1), "readyz_200_s": seen["readyz_200_s"], "waited_quiet_s": quiet_s,
         # the first carries the TokenReview and SubjectAccessReview (then cached), and the render
         "metrics_get_s": seen["metrics_get_s"], "metrics_again_s": round(again_s, 4),
         "metrics_statuses": {str(k): v for k, v in seen["metrics_statuses"].items()},
         "api_to_ready": kc.audit_requests(cp.apiserver.audit_log, m0[0], setup["exp_user"], m0[1], time.time()),
         "api_timeline": api_timeline(cp.apiserver.audit_log, m0[0], setup["exp_user"], t0_unix),
         "log": log_timeline(logf, t0_unix)}
    log(f"{name} #{n_start}: ready in {r['ready_s']} s (/readyz 200 at {r['readyz_200_s']} s, "
        f"/metrics GETs {r['metrics_get_s']} s, once more {r['metrics_again_s']} s), "
        f"{r['cpu_s']} CPU s, kube-apiserver {r['apiserver_cpu_s']} CPU s, other work on the machine "
        f"{r['others_cpu_s']} CPU s, "
        f"{r['api_to_ready']['requests']} API requests")
    return r


def settled_cpu(pid: int, since: float, timeout: float = 3.0) -> float:
    """kube-apiserver's CPU since ``since``, read once it stops growing (two reads 0.1 s apart
    equal; its garbage collector outlasts the last byte a little), or at the deadline."""
    last = [kc.cpu_seconds(pid)]

    def still() -> bool:
        now = kc.cpu_seconds(pid)
        same = now == last[0]
        last[0] = now
        return same
    try:
        kc.wait_for(still, timeout, "kube-apiserver's CPU to settle", interval=0.1)
    except kc.Timeout:
        pass  # busy with something else: what it used until the deadline
    return last[0] - since


def server_gc(cp: Any) -> None:
    """A full garbage collection in kube-apiserver (``/debug/pprof/heap?gc=1`` runs one before it
    writes the profile; needs ``--profiling=true``): the heap the previous start or floor request
    left behind is not collected on the next one's time (on a shared machine it did not remove the
    spread of kube-apiserver's CPU to ready, 0.3 or 0.55 s at 10k: other work's doing)."""
    cp.kube.request("GET", "/debug/pprof/heap?gc=1", ok=(200,), timeout=60)


def settle(cp: Any, gc: bool) -> float:
    """Before each start and each floor request: a collection (``--server-gc``), then quiet."""
    if gc:
        server_gc(cp)
    return wait_quiet(cp.apiserver.pid)


def wait_quiet(pid: int, window: float = 0.3, most: float = 0.02, timeout: float = 5.0) -> float:
    """Waits until kube-apiserver used at most ``most`` CPU seconds over the last ``window`` s (the
    previous request's or exporter's aftermath done: closing watches, garbage collection), so no
    start or floor sample pays for the one before it. Returns the seconds waited; at the deadline
    it goes on (the server busy with its own work) and says so."""
    t0 = time.monotonic()
    samples = [(t0, kc.cpu_seconds(pid))]

    def quiet() -> bool:
        now = time.monotonic()
        samples.append((now, kc.cpu_seconds(pid)))
        old = [x for x in samples if x[0] <= now - window]
        return bool(old) and samples[-1][1] - old[-1][1] <= most
    try:
        kc.wait_for(quiet, timeout, "kube-apiserver quiet", interval=0.05)
    except kc.Timeout:
        log(f"kube-apiserver not quiet after {timeout:g} s; going on")
    return round(time.monotonic() - t0, 2)


def floor_sample(cp: Any, api: sc.Api, cases: dict[str, Any], pairs: dict[str, Any], gc: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pid = cp.apiserver.pid
    for key, pair in (("floor", sc.FLOOR_PAIR), ("as_asked", sc.EXPORTER_PAIR)):
        settle(cp, gc)
        c0 = kc.cpu_seconds(pid)
        wall, n = sc.read_pair(api, cases, pairs[pair])
        out[key] = {"s": round(wall, 3), "bytes": n, "apiserver_cpu_s": round(settled_cpu(pid, c0), 2)}
    log(f"floor: both listed {out['floor']['s']} s ({out['floor']['apiserver_cpu_s']} server CPU s); "
        f"as the exporter asks {out['as_asked']['s']} s")
    return out


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}


def fmt_table(res: dict[str, Any]) -> str:
    f = res["floor"]
    fm = f["floor_s"]["median"]
    a = res["args"]
    lines = [f"{a['leases']} lock Leases ({a['held']} held) + {a['leases']} TerraformMachines, kube-apiserver "
             f"{res['kube_apiserver']}, the chart's defaults (HTTPS self-signed, --auth=kubernetes), "
             f"{a['starts']} starts per binary, polled every {a['poll'] * 1000:g} ms, "
             f"kube-apiserver garbage-collected before each: {a['server_gc']}",
             "",
             "| | ready median s | min s | max s | CPU s (median) | kube-apiserver CPU s to ready (median) "
             "| /readyz 200 median s | first /metrics GET (then once more) median s "
             "| other work's CPU s meanwhile (median) | ready / floor |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, b in res["binaries"].items():
        s = b["ready_s"]
        lines.append(f"| {name} | {s['median']:.3f} | {s['min']:.3f} | {s['max']:.3f} | {b['cpu_s_median']:.2f} "
                     f"| {b['apiserver_cpu_s_median']:.2f} | {b['readyz_200_s_median']:.3f} "
                     f"| {b['first_metrics_get_s_median']:.3f} ({b['metrics_again_s_median']:.3f}) "
                     f"| {b['others_cpu_s_median']:.2f} | {s['median'] / fm:.2f}x |")
    lines.append(f"| floor: both listed ({f['samples']} samples) | {fm:.3f} | {f['floor_s']['min']:.3f} "
                 f"| {f['floor_s']['max']:.3f} | – | {f['floor_apiserver_cpu_s_median']:.2f} | – | – | – | 1.00x |")
    lines.append(f"| as the exporter asks: both watch-lists ({f['samples']} samples) | {f['as_asked_s']['median']:.3f} "
                 f"| {f['as_asked_s']['min']:.3f} | {f['as_asked_s']['max']:.3f} | – "
                 f"| {f['as_asked_apiserver_cpu_s_median']:.2f} | – | – | – | {f['as_asked_s']['median'] / fm:.2f}x |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leases", type=int, default=10000, help="lock Leases (one TerraformMachine each)")
    ap.add_argument("--held", type=int, default=None, help="of them held (default: a tenth)")
    ap.add_argument("--namespaces", type=int, default=100, help="namespaces the fleet is spread over")
    ap.add_argument("--exporter", action="append", metavar="NAME=PATH",
                    help="an exporter binary (repeatable; default: new=target/release/captf-lock-exporter)")
    ap.add_argument("--starts", type=int, default=5, help="starts of each binary (and floor samples - 1)")
    ap.add_argument("--poll", type=float, default=0.02, help="seconds between ready checks")
    ap.add_argument("--encoding", default="gzip", choices=("gzip", "identity"),
                    help="Accept-Encoding of the ready check's /metrics (Prometheus sends gzip)")
    ap.add_argument("--server-gc", choices=("yes", "no"), default="yes",
                    help="a full garbage collection in kube-apiserver before each start and floor request "
                         "(kube-apiserver runs with --profiling=true for it)")
    ap.add_argument("--workers", type=int, default=8, help="parallel POSTs when creating the fleet")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--workdir", help="logs, kubeconfigs, the control plane (default: a new temp dir)")
    ap.add_argument("--json", help="write the results as JSON here")
    args = ap.parse_args()
    if args.held is None:
        args.held = args.leases // 10
    if args.starts < 1:
        ap.error("--starts must be at least 1")
    if not 0 <= args.held <= args.leases:
        ap.error("--held must be between 0 and --leases")
    specs = args.exporter or [f"new={ROOT / 'target' / 'release' / 'captf-lock-exporter'}"]
    exporters: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            ap.error(f"--exporter {spec!r}: expected NAME=PATH")
        if name in exporters:
            ap.error(f"--exporter: {name} given twice")
        if not os.access(path, os.X_OK):
            ap.error(f"--exporter {name}: {path} is not an executable")
        exporters[name] = path

    signal.signal(signal.SIGTERM, kc._on_signal)
    signal.signal(signal.SIGINT, kc._on_signal)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ready-floor-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"work directory {workdir}")

    from pykit.controlplane import KUBE_VERSION, ControlPlane

    t_run = time.monotonic()
    res: dict[str, Any] = {
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "args": {k: v for k, v in vars(args).items() if k != "exporter"},
        "kube_apiserver": KUBE_VERSION, "binaries": {}, "phases_s": {},
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }
    bins: dict[str, Path] = {}
    for name, path in exporters.items():
        b = workdir / f"captf-lock-exporter-{name}"
        shutil.copy2(path, b)  # a rebuild meanwhile does not touch what runs
        bins[name] = b
        try:
            version = subprocess.run([str(b), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            version = "?"
        res["binaries"][name] = {"path": path, "sha256": hashlib.sha256(b.read_bytes()).hexdigest(),
                                 "mtime": dt.datetime.fromtimestamp(Path(path).stat().st_mtime,
                                                                    dt.timezone.utc).isoformat(),
                                 "version": version, "starts": []}
    env = exporter_env()
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE  # the exporter's self-signed certificate, as the kubelet's probes

    # the flag given last wins: pykit's control plane passes --profiling=false
    cp = ControlPlane(workdir / "controlplane", apiserver_args=["--profiling=true"] if args.server_gc == "yes" else [])
    floor: list[dict[str, Any]] = []
    try:
        t = time.monotonic()
        cp.start()
        cp.kube.apply_crds([ROOT / "tests" / "crds" / "terraform.yaml", ROOT / "tests" / "crds" / "capi-cluster.yaml"])
        res["phases_s"]["control_plane"] = round(time.monotonic() - t, 1)
        log(f"control plane up in {res['phases_s']['control_plane']} s ({cp.url})")

        setup = chart_setup(cp, workdir)
        res["identities"] = {"exporter": setup["exp_user"] + " (the chart's ClusterRoles, default values)",
                             "scraper": setup["scrape_user"] + " (bound to the chart's metrics-reader ClusterRole)"}
        res["chart_args"] = setup["chart_args"]

        t = time.monotonic()
        nss, objs = kc.build_fleet(args.leases, args.held, args.namespaces)
        for ns in nss:
            cp.kube.namespace(ns)
        log(f"creating {len(objs)} objects ({args.leases} Leases, {args.held} held, and their TerraformMachines) "
            f"with {args.workers} parallel POSTs")
        secs = kc.create_parallel(cp, objs, args.workers)
        res["fleet"] = {"objects": len(objs), "leases": args.leases, "held": args.held,
                        "namespaces": args.namespaces, "create_s": round(secs, 1)}
        log(f"created in {secs:.1f} s ({len(objs) / secs:.0f}/s)")
        res["warm_watch_caches_s"] = kc.warm_watch_caches(cp)
        res["phases_s"]["fleet_and_caches"] = round(time.monotonic() - t, 1)
        log(f"watch caches warm: {res['warm_watch_caches_s']}")

        api = sc.Api(cp)
        cases, pairs = sc.requests_for(cp)
        for p in (sc.FLOOR_PAIR, sc.EXPORTER_PAIR):
            if p not in pairs:
                raise RuntimeError(f"stream_cost.py has no pair {p!r}")

        t = time.monotonic()
        for rnd in range(args.starts):
            floor.append(floor_sample(cp, api, cases, pairs, args.server_gc == "yes"))
            # old, new | new, old | old, new ...: each binary as often first after the floor sample
            order = list(bins.items()) if rnd % 2 == 0 else list(reversed(bins.items()))
            for name, b in order:
                res["binaries"][name]["starts"].append(
                    one_start(name, b, rnd + 1, cp=cp, setup=setup, args=args, workdir=workdir, env=env, tls=tls))
        floor.append(floor_sample(cp, api, cases, pairs, args.server_gc == "yes"))
        res["phases_s"]["measurement"] = round(time.monotonic() - t, 1)
    finally:
        stop_all()
        cp.stop()
        shutil.rmtree(workdir / "controlplane" / "etcd-data", ignore_errors=True)

    for name, b in res["binaries"].items():
        st = b["starts"]
        b["ready_s"] = summary([s["ready_s"] for s in st])
        b["cpu_s_median"] = round(statistics.median(s["cpu_s"] for s in st), 2)
        b["apiserver_cpu_s_median"] = round(statistics.median(s["apiserver_cpu_s"] for s in st), 2)
        b["readyz_200_s_median"] = round(statistics.median(s["readyz_200_s"] for s in st), 3)
        b["first_metrics_get_s_median"] = round(statistics.median(s["metrics_get_s"][0] for s in st), 4)
        b["others_cpu_s_median"] = round(statistics.median(s["others_cpu_s"] for s in st), 2)
        b["metrics_again_s_median"] = round(statistics.median(s["metrics_again_s"] for s in st), 4)
    res["floor"] = {"samples": len(floor), "runs": floor,
                    "floor_s": summary([f["floor"]["s"] for f in floor]),
                    "floor_apiserver_cpu_s_median": round(statistics.median(f["floor"]["apiserver_cpu_s"] for f in floor), 2),
                    "as_asked_s": summary([f["as_asked"]["s"] for f in floor]),
                    "as_asked_apiserver_cpu_s_median":
                        round(statistics.median(f["as_asked"]["apiserver_cpu_s"] for f in floor), 2)}
    for name, b in res["binaries"].items():
        b["ratio_to_floor"] = round(b["ready_s"]["median"] / res["floor"]["floor_s"]["median"], 2)
    res["phases_s"]["total"] = round(time.monotonic() - t_run, 1)
    res["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    table = fmt_table(res)
    res["table"] = table
    print(table)
    print()
    print(f"phases (s): {res['phases_s']}; fleet created in {res['fleet']['create_s']} s; "
          f"load average {' '.join(res['loadavg_start'])} -> {' '.join(res['loadavg_end'])}")
    for name, b in res["binaries"].items():
        first = b["starts"][0]
        print(f"{name}: {b['version']} sha256 {b['sha256'][:12]}; API requests to ready (first start): "
              f"{first['api_to_ready']['by_verb_resource']}")
        print("  its log, first start (time since the process start):")
        for line in first["log"]:
            print(f"    {line}")
        print("  its API requests, first start (received, s since the process start; took: the server's time):")
        print("    " + ", ".join(f"+{r['received_s']:.3f} {r['verb']} {r['resource']}"
                                + (f" ({r['took_ms']:g} ms)" if "took_ms" in r else "")
                                for r in first["api_timeline"]))
        firsts = [s["api_timeline"][0]["received_s"] for s in b["starts"] if s["api_timeline"]]
        reviews = [r["received_s"] for s in b["starts"] for r in s["api_timeline"] if r["resource"] == "tokenreviews"]
        if firsts:
            print(f"  over its {len(b['starts'])} starts: first API request received at +{statistics.median(firsts):.3f} s "
                  f"(median; {min(firsts):.3f}-{max(firsts):.3f}); TokenReview received at "
                  + (f"+{statistics.median(reviews):.3f} s (median)" if reviews else "–"))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        log(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
