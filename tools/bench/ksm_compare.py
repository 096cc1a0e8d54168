#!/usr/bin/env python3
"""Issue 17: captf-lock-exporter side by side with kube-state-metrics, against one real kube-apiserver.

One run: a real control plane (tests/pykit/controlplane.py: etcd + kube-apiserver built by
tools/kube/build.sh), CAPTF's CRDs (tests/crds), N lock Leases (H of them held, by workstations)
in the shape the backend and CAPTF write them (tests/pykit/builders.py) with their
TerraformMachines, created by parallel POSTs. Then, one after the other, each alone with the API
server:

  exporter  the release binary (copied to the work directory first, so a rebuild does not touch it),
            ServiceAccount ``captf-bench/exporter`` bound to the chart's read-only rules;
  KSM       kube-state-metrics ``--resources=leases``, ServiceAccount ``captf-bench/ksm`` allowed
            list/watch on Leases; by default as upstream ships it (no ``--enable-gzip-encoding``);
  anchor    the exporter's own /metrics bodies (plain and gzip, saved once) served by a trivial
            static HTTP server (this file, ``--serve-static``, a separate process);

and, with ``--ksm-gzip`` (the default), a second KSM with ``--enable-gzip-encoding`` for the
scrape and size rows only; with ``--ksm-facts`` (the default), a third KSM given the same facts
as the exporter needs for its verdicts (``--resources=leases`` plus a custom-resource-state
config for the TerraformMachines' and TerraformClusters' lock timeouts and CAPTF's StateReadable
condition, ServiceAccount ``captf-bench/ksm-facts``), through every row. Each tool's phase:
start -> ready (CPU seconds by then) -> 60 s at rest
(no scrapes: idle CPU, API requests from the audit log, VmRSS at its end) -> body sizes ->
100 sequential scrapes -> 10 concurrent scrapers (VmHWM after a clear_refs reset, and VmRSS
sampled every 5 ms) -> stopped by PID. Prints a Markdown table; ``--out`` gets everything as JSON.

Every wait polls a condition against a deadline. Every process started here is stopped by its
PID on exit, on failure and on SIGINT/SIGTERM.

Needs the Python packages of tests/requirements.txt (requests, PyYAML, cryptography,
prometheus_client).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import http.client
import http.server
import json
import os
import platform
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: the shared procs module
from procs import exporter_env, free_port, start, stop, stop_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

PROM_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
               "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.x/3.x sends
TEXT_ACCEPT = "text/plain;version=0.0.4"
CLK_TCK = os.sysconf("SC_CLK_TCK")
MiB = 1024 * 1024
M = "TerraformMachine"
BENCH_NS = "captf-bench"


def log(*a: object) -> None:
    print(f"[ksm-compare {time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# The static anchor (a separate process: python3 ksm_compare.py --serve-static DIR --port P)
# ------------------------------------------------------------------------------------------------

def serve_static(d: Path, port: int) -> None:
    plain = (d / "body.plain").read_bytes()
    gz = (d / "body.gzip").read_bytes()
    ctype = (d / "content-type").read_text().strip()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the exporter and KSM
        disable_nagle_algorithm = True  # TCP_NODELAY, as Go's and hyper's servers

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/readyz":
                body, extra = b"ok\n", {}
            elif self.path == "/metrics":
                want_gzip = "gzip" in (self.headers.get("Accept-Encoding") or "")
                body, extra = (gz, {"Content-Encoding": "gzip"}) if want_gzip else (plain, {})
            else:
                self.send_error(404)
                return
            head = [f"HTTP/1.1 200 OK", f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
                    *(f"{k}: {v}" for k, v in extra.items())]
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)  # one write

        def log_message(self, *_a: Any) -> None:
            pass

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        request_queue_size = 128  # the default backlog of 5 drops the 10 scrapers' SYNs (1 s retransmits)

    S(("127.0.0.1", port), H).serve_forever()


# ------------------------------------------------------------------------------------------------
# Processes: started here, stopped here by PID
# ------------------------------------------------------------------------------------------------

def _on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop everything


class Timeout(AssertionError):
    pass


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.1,
             alive: subprocess.Popen | None = None) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"process {alive.args[0]} (pid {alive.pid}) exited with {alive.returncode} "
                               f"while waiting for {what}")
        try:
            v = pred()
            if v:
                return v
            last = v
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


# ------------------------------------------------------------------------------------------------
# /proc
# ------------------------------------------------------------------------------------------------

def status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
    return sum(v) - idle, sum(v)


def busy_pct(a: tuple[int, int], b: tuple[int, int]) -> float:
    """Share of all CPUs busy between two machine_ticks(), in % of the whole machine."""
    return round((b[0] - a[0]) / max(1, b[1] - a[1]) * 100, 1)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def thread_counters(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (ns on a CPU from /proc/PID/task/TID/schedstat, voluntary + involuntary
    context switches). utime+stime in /proc/PID/stat counts 10 ms ticks: an idle minute of either
    tool is 0 or 1 tick."""
    out: dict[int, tuple[int, int]] = {}
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = int((t / "schedstat").read_text().split()[0])
            switches = 0
            for line in (t / "status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                    switches += int(line.split()[1])
            out[int(t.name)] = (ns, switches)
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
    return out


class ThreadUsage:
    """CPU ns and context switches of a process over a window, summed per thread and sampled
    every ``every`` s: a thread that ends inside the window (an idle runtime's blocking-pool
    thread does after 10 s) keeps what it used up to its last sample, instead of taking its
    whole past out of a difference of two totals."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every = pid, every
        self.first: dict[int, tuple[int, int]] = {}
        self.last: dict[int, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        # a thread first seen after the window opened was born in it: all its use counts
        born = (0, 0) if self.last else None
        for tid, v in thread_counters(self.pid).items():
            self.first.setdefault(tid, born or v)
            self.last[tid] = v

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self._sample()
            except OSError:
                return

    def __enter__(self) -> "ThreadUsage":
        self._sample()
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        self._sample()

    def totals(self) -> tuple[int, int]:
        """(CPU ns, context switches) used in the window."""
        ns = sum(self.last[t][0] - self.first[t][0] for t in self.last)
        sw = sum(self.last[t][1] - self.first[t][1] for t in self.last)
        return ns, sw


class PeakRss:
    """Peak RSS of a phase: VmHWM after a reset (clear_refs 5), and VmRSS sampled every 5 ms."""

    def __init__(self, pid: int):
        self.pid = pid
        self.sampled_kib = 0
        self.hwm_kib = 0
        self.reset_ok = False
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sampled_kib = max(self.sampled_kib, status_kib(self.pid, "VmRSS"))
            except OSError:
                return
            self._stop.wait(0.005)

    def __enter__(self) -> "PeakRss":
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")
            self.reset_ok = True
        except OSError:
            self.reset_ok = False
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()
        if self.reset_ok:
            self.hwm_kib = status_kib(self.pid, "VmHWM")

    @property
    def peak_kib(self) -> int:
        return max(self.sampled_kib, self.hwm_kib)


# ------------------------------------------------------------------------------------------------
# HTTP
# ------------------------------------------------------------------------------------------------

class Scraper:
    """One keep-alive connection; ``get`` returns (seconds to the last body byte, raw body, headers).
    ``tls``: HTTPS with this context instead of plain HTTP; ``headers``: sent with every request
    (e.g. ``Authorization``)."""

    def __init__(self, port: int, timeout: float = 30.0, tls: "ssl.SSLContext | None" = None,
                 headers: dict[str, str] | None = None):
        self.port = port
        self.timeout = timeout
        self.tls = tls
        self.headers = dict(headers or {})
        #: time.monotonic() when the last answer's last byte arrived: a ready check that parses a
        #: large body (50 MB at 100k for the exporter) dates readiness by the answer, not by the
        #: end of its own parsing
        self.answered_at = 0.0
        self.c: http.client.HTTPConnection | None = None

    def get(self, path: str, accept: str = PROM_ACCEPT, encoding: str = "gzip") -> tuple[float, int, bytes, dict]:
        for attempt in (1, 2):
            if self.c is None:
                self.c = (http.client.HTTPSConnection("127.0.0.1", self.port, timeout=self.timeout, context=self.tls)
                          if self.tls is not None else
                          http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout))
            t = time.perf_counter()
            try:
                self.c.request("GET", path, headers={**self.headers, "Accept": accept, "Accept-Encoding": encoding})
                r = self.c.getresponse()
                body = r.read()
                self.answered_at = time.monotonic()
                return time.perf_counter() - t, r.status, body, {k.lower(): v for k, v in r.getheaders()}
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()  # an idle keep-alive connection the server closed: once more, anew
                if attempt == 2:
                    raise
            except BaseException:
                self.close()  # e.g. connection refused: the next call starts on a new connection
                raise
        raise AssertionError("unreachable")

    def metrics(self, encoding: str = "gzip", accept: str = PROM_ACCEPT) -> tuple[float, bytes, dict]:
        """GET /metrics; the body decompressed when it came gzip'd; raises on a status other than 200."""
        secs, status, body, h = self.get("/metrics", accept, encoding)
        if status != 200:
            raise RuntimeError(f"/metrics on :{self.port}: {status}")
        if h.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        return secs, body, h

    def close(self) -> None:
        if self.c is not None:
            self.c.close()
            self.c = None


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


def count_lock_series(body: bytes, name: str) -> int:
    """Series of ``name`` about lock Leases (KSM also exposes every other Lease of the cluster)."""
    pre = name.encode() + b"{"
    return sum(1 for line in body.split(b"\n") if line.startswith(pre) and b'lease="lock-tfstate-' in line)


def exporter_complete(body: bytes, n: int, held: int) -> bool:
    # an OpenMetrics or 0.0.4 sample line: `name{labels} value` (no timestamps from the exporter)
    vals = []
    for line in body.split(b"\n"):
        if line.startswith(b"captf_state_lock_held{"):
            vals.append(float(line.rsplit(b" ", 1)[1]))
    return len(vals) == n and sum(vals) == held


# ------------------------------------------------------------------------------------------------
# The fleet
# ------------------------------------------------------------------------------------------------

def build_fleet(n: int, held: int, namespaces: int) -> tuple[list[str], list[dict[str, Any]]]:
    from pykit.builders import lease, lock_lease, state_suffix, terraform_object

    nss = [f"bench-{i:03d}" for i in range(namespaces)]
    step = n / held if held else 0
    held_idx = {int(k * step) for k in range(held)} if held else set()
    objs: list[dict[str, Any]] = []
    taken = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    for i in range(n):
        ns = nss[i % namespaces]
        name = f"m{i:05d}"
        objs.append(terraform_object(M, ns, name))
        if i in held_idx:
            # held by a workstation: class foreign, no holder pod to read
            # taken two hours ago: overdue from the start, so no lock turns overdue mid-run
            objs.append(lock_lease(ns, M, name, who=f"user{i % 97}@laptop-{i % 13}", created=taken))
        else:
            objs.append(lease(ns, state_suffix(ns, M, name), owner_kind=M, owner_name=name))
    return nss, objs


def create_parallel(cp: Any, objs: list[dict[str, Any]], workers: int) -> float:
    from pykit.controlplane import Kube

    local = threading.local()
    made: list[Kube] = []
    lock = threading.Lock()

    def one(o: dict[str, Any]) -> None:
        if not hasattr(local, "kube"):
            local.kube = Kube(cp.url, cp.admin_token, cp.ca_file)
            with lock:
                made.append(local.kube)
        local.kube.create(o)

    t = time.monotonic()
    try:
        with ThreadPoolExecutor(workers) as ex:
            for _ in ex.map(one, objs):
                pass
    finally:
        for k in made:
            k.close()
    return time.monotonic() - t


EXPORTER_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["infrastructure.cluster.x-k8s.io"],
     "resources": ["terraformclusters", "terraformmachines", "terraformmachinepools", "terraformplans"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["get", "list", "watch"]},
]
KSM_RULES = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list", "watch"]}]
#: KSM given the facts the exporter's verdicts need: its custom-resource-state discovery lists and
#: watches CRDs, then the kinds its config names
KSM_FACTS_RULES = [
    *KSM_RULES,
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
    {"apiGroups": ["infrastructure.cluster.x-k8s.io"], "resources": ["terraformmachines", "terraformclusters"],
     "verbs": ["list", "watch"]},
]


def ksm_facts_config(version: str) -> str:
    """kube-state-metrics' custom-resource-state config for what the exporter reads of the
    Terraform* objects to judge a lock: the lock timeout (spec.jobs, and a TerraformCluster's
    spec.defaults.jobs it passes down) and CAPTF's own verdict, the StateReadable condition."""
    def gauge(name: str, help_: str, path: list[str]) -> dict[str, Any]:
        return {"name": name, "help": help_, "each": {"type": "Gauge", "gauge": {"path": path, "nilIsZero": True}}}
    readable = {"name": "state_readable", "help": "status.conditions[StateReadable].status",
                "each": {"type": "StateSet", "stateSet": {
                    "labelName": "status", "path": ["status", "conditions", "[type=StateReadable]", "status"],
                    "list": ["True", "False", "Unknown"]}}}
    gvk = lambda kind: {"group": "infrastructure.cluster.x-k8s.io", "version": version, "kind": kind}  # noqa: E731
    cfg = {"kind": "CustomResourceStateMetrics", "spec": {"resources": [
        {"groupVersionKind": gvk("TerraformMachine"), "metricNamePrefix": "captf_terraformmachine",
         "metrics": [gauge("lock_timeout_seconds", "spec.jobs.lockTimeoutSeconds",
                           ["spec", "jobs", "lockTimeoutSeconds"]), readable]},
        {"groupVersionKind": gvk("TerraformCluster"), "metricNamePrefix": "captf_terraformcluster",
         "metrics": [gauge("default_lock_timeout_seconds", "spec.defaults.jobs.lockTimeoutSeconds",
                           ["spec", "defaults", "jobs", "lockTimeoutSeconds"]), readable]},
    ]}}
    return json.dumps(cfg, indent=1)  # YAML is a superset of JSON


def service_account(cp: Any, name: str, rules: list[dict[str, Any]], workdir: Path) -> tuple[str, Path]:
    """ServiceAccount captf-bench/<name>, a ClusterRole with ``rules`` bound to it, and a kubeconfig
    with its token (TokenRequest, 4 h). Returns (audit user name, kubeconfig)."""
    kube = cp.kube
    kube.request("POST", "/api/v1/namespaces/%s/serviceaccounts" % BENCH_NS, json={
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": BENCH_NS}})
    role = f"captf-bench-{name}"
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": rules})
    kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": BENCH_NS}]})
    token = kube.token(BENCH_NS, name, seconds=4 * 3600)
    kc = cp.kubeconfig(workdir / f"kubeconfig-{name}", token, user=name)
    return f"system:serviceaccount:{BENCH_NS}:{name}", kc


# ------------------------------------------------------------------------------------------------
# The audit log, read from an offset
# ------------------------------------------------------------------------------------------------

def audit_ts(s: str) -> float:
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def audit_requests(path: Path, offset: int, user: str, t0: float, t1: float) -> dict[str, Any]:
    """Requests of ``user`` received in [t0, t1) (Unix time), from the audit log past ``offset``:
    one per auditID; by verb and resource; watches counted when received."""
    seen: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            if not raw.startswith(b"{") or user.encode() not in raw:
                continue
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            if ev.get("user", {}).get("username") != user:
                continue
            ts = audit_ts(ev["requestReceivedTimestamp"])
            if not (t0 <= ts < t1):
                continue
            seen.setdefault(ev["auditID"], ev)
    by: dict[str, int] = {}
    for ev in seen.values():
        res = (ev.get("objectRef") or {}).get("resource", "-")
        k = f"{ev['verb']} {res}"
        by[k] = by.get(k, 0) + 1
    return {"requests": len(seen), "by_verb_resource": dict(sorted(by.items()))}


# ------------------------------------------------------------------------------------------------
# Series per Lease
# ------------------------------------------------------------------------------------------------

def series_per_lease_exporter(body: bytes, n: int) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    per_family: dict[str, int] = {}
    held_keys: set[tuple[str, str, str]] = set()
    by_key: dict[tuple[str, str, str], list[str]] = {}
    total = 0
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            total += 1
            lb = s.labels
            if "name" in lb and "kind" in lb and "namespace" in lb:
                key = (lb["namespace"], lb["kind"], lb["name"])
                per_family[s.name] = per_family.get(s.name, 0) + 1
                by_key.setdefault(key, []).append(s.name)
                if s.name == "captf_state_lock_held" and s.value == 1:
                    held_keys.add(key)
    held_counts = [len(v) for k, v in by_key.items() if k in held_keys]
    free_counts = [len(v) for k, v in by_key.items() if k not in held_keys]
    return {
        "families_per_object": dict(sorted(per_family.items())),
        "objects": len(by_key),
        "series_per_object": round(sum(per_family.values()) / max(1, n), 2),
        "series_per_held_lease": round(sum(held_counts) / max(1, len(held_counts)), 2),
        "series_per_free_lease": round(sum(free_counts) / max(1, len(free_counts)), 2),
        "samples_total": total,
    }


def series_per_lease_ksm(body: bytes, n: int) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    per_family: dict[str, int] = {}
    other: dict[str, int] = {}
    total = machines = 0
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            total += 1
            if s.name.startswith("kube_lease_"):
                d = per_family if s.labels.get("lease", "").startswith("lock-tfstate-") else other
                d[s.name] = d.get(s.name, 0) + 1
            elif s.name.startswith("captf_terraformmachine_"):  # KSM given the same facts
                machines += 1
    return {
        "families_per_lease": dict(sorted(per_family.items())),
        "series_of_other_leases": dict(sorted(other.items())),
        "series_per_lease": round(sum(per_family.values()) / max(1, n), 2),
        "series_per_machine": round(machines / max(1, n), 2),
        "samples_total": total,
    }


# ------------------------------------------------------------------------------------------------
# One tool's phase
# ------------------------------------------------------------------------------------------------

#: What the exporter and KSM read, as (group, plural); "" is the core group.
WATCHED = [("coordination.k8s.io", "leases"), ("", "pods"), ("events.k8s.io", "events"),
           *((("infrastructure.cluster.x-k8s.io", r) for r in
              ("terraformclusters", "terraformmachines", "terraformmachinepools", "terraformplans"))),
           ("cluster.x-k8s.io", "clusters")]


def warm_watch_caches(cp: Any, timeout: float = 120.0) -> dict[str, float]:
    """One streaming watch-list of each watched resource as the admin, repeated until it is served
    (not 429 "storage is (re)initializing") and ends its initial events. kube-apiserver makes a
    CRD's watch cache on the first request for it and fills it from etcd; in a management cluster
    CAPTF's controller and Cluster API watch these kinds all the time, so their caches are warm when
    an exporter starts. Without this the first tool to start (the exporter) would pay for filling
    them. Returns the seconds each took."""
    import ssl

    host, port = cp.url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    took: dict[str, float] = {}
    for group, plural in WATCHED:
        if group:
            gv = cp.kube.get(f"/apis/{group}").json()["preferredVersion"]["groupVersion"]
            base = f"/apis/{gv}/{plural}"
        else:
            base = f"/api/v1/{plural}"
        path = (base + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                "&allowWatchBookmarks=true&timeoutSeconds=30")
        t0 = time.monotonic()

        def served() -> bool:
            c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
            try:
                c.request("GET", path, headers={"Authorization": f"Bearer {cp.admin_token}"})
                r = c.getresponse()
                if r.status != 200:
                    return False
                tail = b""
                while chunk := r.read1(65536):
                    if b"initial-events-end" in tail + chunk:
                        return True
                    tail = chunk[-64:]
                return False
            finally:
                c.close()
        wait_for(served, timeout, f"the watch cache of {plural}", interval=0.2)
        took[plural] = round(time.monotonic() - t0, 2)
    return took


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def start_only(tool: str, launch: Callable[[], subprocess.Popen], port: int, ready: Callable[[Scraper], bool], *,
               cp: Any, user: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """One start to ready, then stop: the ready figures of one of ``--starts``."""
    m0, t0 = mark(cp), time.monotonic()
    p = launch()
    try:
        probe = Scraper(port)
        try:
            wait_for(lambda: ready(probe), args.ready_timeout, f"{tool} ready", interval=0.1, alive=p)
        finally:
            probe.close()
        r = {"ready_s": round(probe.answered_at - t0, 2), "ready_cpu_s": round(cpu_seconds(p.pid), 2)}
        if user is not None:
            r["api_to_ready"] = audit_requests(cp.apiserver.audit_log, m0[0], user, m0[1], time.time())["requests"]
    finally:
        stop(p)
    log(f"{tool}: ready in {r['ready_s']} s ({r['ready_cpu_s']} CPU s)")
    return r


def fold_starts(r: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    """The measured phase's start joins the earlier ones: ready_s becomes their median."""
    last = {"ready_s": r["ready_s"], "ready_cpu_s": r["ready_cpu_s"]}
    if "api_to_ready" in r:
        last["api_to_ready"] = r["api_to_ready"]["requests"]
    runs = [*earlier, last]
    r["ready_runs"] = runs
    r["ready_s"] = round(median([x["ready_s"] for x in runs]), 2)
    r["ready_cpu_s"] = round(median([x["ready_cpu_s"] for x in runs]), 2)
    r["ready_s_range"] = [min(x["ready_s"] for x in runs), max(x["ready_s"] for x in runs)]


def mark(cp: Any) -> tuple[int, float]:
    return cp.apiserver.audit_log.stat().st_size, time.time()


def measure(tool: str, proc: subprocess.Popen, port: int, ready: Callable[[Scraper], bool], *,
            cp: Any, user: str | None, args: argparse.Namespace, t_start: float,
            mark: tuple[int, float], rows: set[str] | None = None) -> dict[str, Any]:
    """Everything the table shows for one running process. ``rows`` None: all. ``mark``: the audit
    log's size and the Unix time just before the process was started."""
    want = (lambda r: rows is None or r in rows)
    out: dict[str, Any] = {"pid": proc.pid}
    ticks0 = machine_ticks()
    probe = Scraper(port)
    try:
        wait_for(lambda: ready(probe), args.ready_timeout, f"{tool} ready", interval=0.1, alive=proc)
    finally:
        probe.close()
    out["ready_s"] = round(probe.answered_at - t_start, 2)
    out["ready_cpu_s"] = round(cpu_seconds(proc.pid), 2)
    out["rss_ready_MiB"] = round(status_kib(proc.pid, "VmRSS") / 1024, 1)
    log(f"{tool}: ready in {out['ready_s']} s ({out['ready_cpu_s']} CPU s), RSS {out['rss_ready_MiB']} MiB")
    if user is not None:
        out["api_to_ready"] = audit_requests(cp.apiserver.audit_log, mark[0], user, mark[1], time.time())

    if want("idle"):
        audit = cp.apiserver.audit_log
        offset = audit.stat().st_size
        c0, w0, m0, k0 = cpu_seconds(proc.pid), time.time(), time.monotonic(), machine_ticks()
        log(f"{tool}: {args.idle_seconds} s at rest (no scrapes)")
        with ThreadUsage(proc.pid) as usage:
            # a measured window, not a wait for something: it ends early only if the process dies
            while time.monotonic() - m0 < args.idle_seconds:
                if proc.poll() is not None:
                    raise RuntimeError(f"{tool} exited with {proc.returncode} at rest")
                time.sleep(min(1.0, max(0.0, args.idle_seconds - (time.monotonic() - m0))))
        c1, w1, m1, k1 = cpu_seconds(proc.pid), time.time(), time.monotonic(), machine_ticks()
        idle_ns, idle_switches = usage.totals()
        out["machine_busy_idle_pct"] = busy_pct(k0, k1)
        window = m1 - m0
        out["idle_window_s"] = round(window, 1)
        # on-CPU time from schedstat (ns); the tick count of /proc/PID/stat kept beside it
        out["idle_cpu_pct"] = round(idle_ns / 1e9 / window * 100, 4)
        out["idle_cpu_ms_per_min"] = round(idle_ns / 1e6 * 60 / window, 2)
        out["idle_cpu_pct_ticks"] = round((c1 - c0) / window * 100, 3)
        out["idle_wakeups_per_min"] = round(idle_switches * 60 / window, 1)
        out["rss_rest_MiB"] = round(status_kib(proc.pid, "VmRSS") / 1024, 1)
        if user is not None:
            # the audit log is written in blocking mode: a request received in the window is there
            a = audit_requests(audit, offset, user, w0, w1)
            out["api_rest"] = a
            out["api_req_per_min"] = round(a["requests"] * 60 / (w1 - w0), 2)
        else:
            out["api_req_per_min"] = 0.0

    sc = Scraper(port)
    scrapes_cpu0, scrapes_n = cpu_seconds(proc.pid), 0
    try:
        if want("sizes"):
            _, status, plain, h = sc.get("/metrics", PROM_ACCEPT, "identity")
            _, status2, gz, hg = sc.get("/metrics", PROM_ACCEPT, "gzip")
            assert status == status2 == 200, (status, status2)
            out["content_type"] = h.get("content-type")
            out["bytes_plain"] = len(plain)
            if hg.get("content-encoding") == "gzip":
                out["gzip_served"] = True
                out["bytes_gzip"] = len(gz)
                # its plain bytes compressed whole at level 6: what parts compressed apart cost
                out["bytes_gzip_whole"] = len(gzip.compress(gzip.decompress(gz), 6))
            else:
                out["gzip_served"] = False
                out["bytes_gzip"] = len(gzip.compress(plain, 6))  # what Go's default level roughly gives
            out["_plain"], out["_gzip"] = plain, gz
            _, status3, text, _ = sc.get("/metrics", TEXT_ACCEPT, "identity")
            out["_text"] = text
            scrapes_n += 3

        if want("seq"):
            sc.metrics()  # warm the connection
            times = [sc.metrics()[0] for _ in range(args.scrapes)]
            out["scrape_p50_ms"] = round(pct(times, 50) * 1000, 1)
            out["scrape_p99_ms"] = round(pct(times, 99) * 1000, 1)
            out["scrapes"] = len(times)
            scrapes_n += 1 + len(times)
    finally:
        sc.close()

    if want("concurrent"):
        conc_times: list[float] = []
        lk = threading.Lock()
        errors: list[BaseException] = []

        def scraper() -> None:
            s = Scraper(port, timeout=120)
            try:
                for _ in range(args.concurrent_rounds):
                    secs = s.metrics()[0]
                    with lk:
                        conc_times.append(secs)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                s.close()
        with PeakRss(proc.pid) as pk:
            ts = [threading.Thread(target=scraper) for _ in range(args.concurrency)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        if errors:
            raise RuntimeError(f"{tool}: concurrent scrape failed: {errors[0]!r}")
        out["rss_peak_conc_MiB"] = round(pk.peak_kib / 1024, 1)
        out["rss_peak_conc_how"] = "VmHWM after clear_refs" if pk.reset_ok else "VmRSS sampled every 5 ms"
        out["conc_p50_ms"] = round(pct(conc_times, 50) * 1000, 1)
        out["conc_p99_ms"] = round(pct(conc_times, 99) * 1000, 1)
        out["rss_after_MiB"] = round(status_kib(proc.pid, "VmRSS") / 1024, 1)
        scrapes_n += len(conc_times)
    if scrapes_n:
        # the process's CPU over the scrape phases (nothing else asks it for work then) per scrape
        out["cpu_per_scrape_ms"] = round((cpu_seconds(proc.pid) - scrapes_cpu0) / scrapes_n * 1000, 2)
        out["scrapes_measured_for_cpu"] = scrapes_n
    out["cpu_total_s"] = round(cpu_seconds(proc.pid), 2)
    out["machine_busy_pct"] = busy_pct(ticks0, machine_ticks())
    out["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    return out


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------

def fmt_table(res: dict[str, Any]) -> str:
    cols = [("exporter", "captf-lock-exporter"), ("ksm", f"kube-state-metrics {res['ksm_version']}"),
            ("static", "static anchor")]
    if "ksm_gzip" in res["tools"]:
        cols.insert(2, ("ksm_gzip", "KSM --enable-gzip-encoding"))
    if "ksm_facts" in res["tools"]:
        cols.insert(len(cols) - 1, ("ksm_facts", "KSM with the same facts (Leases + Terraform* timeouts, StateReadable)"))
    T = res["tools"]

    def g(tool: str, key: str, f: Callable[[Any], str] = str) -> str:
        v = T.get(tool, {}).get(key)
        return "–" if v is None else f(v)

    def size(tool: str) -> str:
        t = T.get(tool, {})
        if "bytes_gzip" not in t:
            return "–"
        s = f"{t['bytes_plain'] / MiB:.2f} MiB / {t['bytes_gzip'] / MiB:.2f} MiB"
        return s if t.get("gzip_served") else s + " (not served; Python gzip -6)"

    rows = [
        ("time to ready, median of the starts (CPU s by then) [fastest-slowest]", lambda t: "–" if t == "static" else
         f"{g(t, 'ready_s')} s ({g(t, 'ready_cpu_s')})"
         + (f" [{T[t]['ready_s_range'][0]}-{T[t]['ready_s_range'][1]}]" if "ready_s_range" in T.get(t, {}) else "")),
        (f"RSS at rest (VmRSS after {res['args']['idle_seconds']:g} s idle)", lambda t: g(t, "rss_rest_MiB", lambda v: f"{v} MiB")),
        (f"peak RSS, {res['args']['concurrency']} concurrent scrapers",
         lambda t: g(t, "rss_peak_conc_MiB", lambda v: f"{v} MiB")),
        ("RSS after the scrapes", lambda t: g(t, "rss_after_MiB", lambda v: f"{v} MiB")),
        (f"scrape p50 / p99 ({res['args']['scrapes']} sequential, gzip)",
         lambda t: f"{g(t, 'scrape_p50_ms')} / {g(t, 'scrape_p99_ms')} ms" if "scrape_p50_ms" in T.get(t, {}) else "–"),
        (f"{res['args']['concurrency']} concurrent scrapers p50 / p99",
         lambda t: f"{g(t, 'conc_p50_ms')} / {g(t, 'conc_p99_ms')} ms" if "conc_p50_ms" in T.get(t, {}) else "–"),
        ("CPU per scrape (server's CPU over all its scrapes / count)",
         lambda t: g(t, "cpu_per_scrape_ms", lambda v: f"{v:g} ms")),
        ("body plain / gzip", size),
        (f"idle CPU ({res['args']['idle_seconds']:g} s, % of one core; ms of CPU per minute)",
         lambda t: f"{g(t, 'idle_cpu_pct', lambda v: f'{v:.3f}')} % ({g(t, 'idle_cpu_ms_per_min')} ms)"
         if "idle_cpu_pct" in T.get(t, {}) else "–"),
        ("thread wakeups / min at rest (context switches)", lambda t: g(t, "idle_wakeups_per_min")),
        ("API requests / min at rest (audit log)", lambda t: g(t, "api_req_per_min", lambda v: f"{v:g}")),
        ("machine busy over the phase / at rest (all processes, % of all cores)",
         lambda t: f"{g(t, 'machine_busy_pct')} % / {g(t, 'machine_busy_idle_pct')} %"),
        ("series per Lease", lambda t: {
            "exporter": f"{res['series']['exporter']['series_per_object']:g} "
                        f"(held {res['series']['exporter']['series_per_held_lease']:g}, "
                        f"free {res['series']['exporter']['series_per_free_lease']:g})",
            "ksm": f"{res['series']['ksm']['series_per_lease']:g}",
            "ksm_gzip": f"{res['series']['ksm']['series_per_lease']:g}",
            "ksm_facts": (f"{res['series']['ksm_facts']['series_per_lease']:g} "
                          f"+ {res['series']['ksm_facts']['series_per_machine']:g} per TerraformMachine")
            if "ksm_facts" in res["series"] else "–",
            "static": f"{res['series']['exporter']['series_per_object']:g}"}[t]),
    ]
    # exporter against KSM as shipped (its gzip row against KSM with gzip, which serves gzip):
    # lower is better for every figure but the series; "even" within 5 % or 0.01 of each other
    def versus(key: str, other: str = "ksm", noise: float = 0.05, floor: float = 0.01) -> str:
        a, b = T.get("exporter", {}).get(key), T.get(other, {}).get(key)
        if a is None or b is None:
            return "–"
        if abs(a - b) <= max(floor, noise * max(abs(a), abs(b))):
            return "even (within noise)"
        return "ahead" if a < b else "behind"

    def gzip_vs(_: str = "") -> str:
        e, k = T.get("exporter", {}), T.get("ksm_gzip") or T.get("ksm", {})
        if "bytes_gzip" not in e or "bytes_gzip" not in k:
            return "–"
        # the exporter's body carries ~5 series per Lease to KSM's 1: judged against its own
        # body compressed whole (issue 25), and shown beside KSM's
        whole = e.get("bytes_gzip_whole")
        verdict = "ahead" if e["bytes_gzip"] < k["bytes_gzip"] else "behind"
        if whole:
            ratio = e["bytes_gzip"] / whole
            return f"{verdict} of KSM; {ratio:.2f}x its own body compressed whole"
        return verdict

    # each compared figure: its key and the least difference that is not noise
    figures = {"time to ready": ("ready_s", 0.01), "RSS at rest": ("rss_rest_MiB", 0.01),
               "peak RSS": ("rss_peak_conc_MiB", 0.01), "RSS after": ("rss_after_MiB", 0.01),
               "scrape p50": ("scrape_p50_ms", 0.01), "concurrent": ("conc_p99_ms", 0.01),
               "CPU per scrape": ("cpu_per_scrape_ms", 0.01), "idle CPU": ("idle_cpu_pct", 0.001),
               "thread wakeups": ("idle_wakeups_per_min", 1), "API requests": ("api_req_per_min", 0.5)}
    other_rows = {"body plain": (gzip_vs(), "–"), "machine busy": ("–", "–"),
                  "series per Lease": ("– (not the same content)", "–")}

    def verdict(label: str, other: str = "ksm") -> str:
        for k, (key, floor) in figures.items():
            if label.startswith(k) or k in label:
                return versus(key, other, floor=floor)
        for k, v in other_rows.items():
            if label.startswith(k):
                return v[0] if other == "ksm" else v[1]
        return "–"

    with_facts = "ksm_facts" in T
    lines = ["| figure | " + " | ".join(c[1] for c in cols) + " | exporter vs KSM |"
             + (" exporter vs KSM with the same facts |" if with_facts else ""),
             "| --- | " + " | ".join("---" for _ in cols) + " | --- |" + (" --- |" if with_facts else "")]
    for label, f in rows:
        lines.append(f"| {label} | " + " | ".join(f(c[0]) for c in cols) + f" | {verdict(label)} |"
                     + (f" {verdict(label, 'ksm_facts')} |" if with_facts else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------

def default_ksm() -> str:
    v = (ROOT / "tools" / "ksm" / "VERSION").read_text().strip()
    base = os.environ.get("CAPTF_BIN_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "captf-lock-exporter" / "bin")
    return str(Path(base) / f"kube-state-metrics-{v}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leases", type=int, default=10000, help="lock Leases (one TerraformMachine each)")
    ap.add_argument("--held", type=int, default=1000, help="of them held (lock-info, by a workstation)")
    ap.add_argument("--namespaces", type=int, default=100, help="namespaces the fleet is spread over")
    ap.add_argument("--exporter", default=str(ROOT / "target" / "release" / "captf-lock-exporter"),
                    help="the exporter binary (copied to the work directory before it runs)")
    ap.add_argument("--ksm", default=default_ksm(), help="the kube-state-metrics binary (tools/ksm/build.sh)")
    ap.add_argument("--ksm-gzip", choices=("yes", "no"), default="yes",
                    help="also run KSM with --enable-gzip-encoding for the scrape and size rows")
    ap.add_argument("--ksm-facts", choices=("yes", "no"), default="yes",
                    help="also run KSM given the facts the exporter's verdicts need (Leases and the "
                         "Terraform* lock timeouts and StateReadable, by custom-resource-state), through every row")
    ap.add_argument("--scrapes", type=int, default=100, help="sequential scrapes per tool")
    ap.add_argument("--concurrency", type=int, default=10, help="concurrent scrapers")
    ap.add_argument("--concurrent-rounds", type=int, default=10, help="scrapes per concurrent scraper")
    ap.add_argument("--idle-seconds", type=float, default=60.0, help="the window at rest per tool")
    ap.add_argument("--workers", type=int, default=8, help="parallel POSTs when creating the fleet")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--starts", type=int, default=3,
                    help="starts to ready per tool (the last one goes on to the other phases); the median is shown")
    ap.add_argument("--cold-caches", action="store_true",
                    help="do not warm the API server's watch caches before the first tool starts")
    ap.add_argument("--workdir", help="logs, kubeconfigs, the control plane (default: a new temp dir)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--serve-static", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve_static:
        serve_static(Path(args.serve_static), args.port)
        return 0
    if args.starts < 1:
        ap.error("--starts must be at least 1")
    if not 0 <= args.held <= args.leases:
        ap.error("--held must be between 0 and --leases")
    for what, p in (("exporter", args.exporter), ("kube-state-metrics", args.ksm)):
        if not os.access(p, os.X_OK):
            ap.error(f"{what} binary {p} not found (scripts/bench-ksm.sh builds both)")

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ksm-compare-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"work directory {workdir}")

    from pykit.controlplane import KUBE_VERSION, ControlPlane

    exporter_bin = workdir / "captf-lock-exporter"
    shutil.copy2(args.exporter, exporter_bin)
    ksm_bin = workdir / "kube-state-metrics"
    shutil.copy2(args.ksm, ksm_bin)
    ksm_version = Path(args.ksm).name.removeprefix("kube-state-metrics-")

    res: dict[str, Any] = {
        "when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        "args": {k: v for k, v in vars(args).items() if k not in ("serve_static", "port")},
        "kube_apiserver": KUBE_VERSION, "ksm_version": ksm_version, "tools": {}, "series": {},
    }
    res["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    res["exporter_binary"] = {"path": args.exporter,
                              "mtime": dt.datetime.fromtimestamp(Path(args.exporter).stat().st_mtime,
                                                                 dt.timezone.utc).isoformat(),
                              "sha256": hashlib.sha256(exporter_bin.read_bytes()).hexdigest()}
    try:
        res["exporter_version"] = subprocess.run([str(exporter_bin), "--version"], capture_output=True,
                                                 text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        res["exporter_version"] = "?"

    cp = ControlPlane(workdir / "controlplane")
    try:
        t = time.monotonic()
        cp.start()
        cp.kube.apply_crds([ROOT / "tests" / "crds" / "terraform.yaml", ROOT / "tests" / "crds" / "capi-cluster.yaml"])
        res["control_plane_start_s"] = round(time.monotonic() - t, 1)
        log(f"control plane up in {res['control_plane_start_s']} s ({cp.url})")

        cp.kube.namespace(BENCH_NS)
        exp_user, exp_kc = service_account(cp, "exporter", EXPORTER_RULES, workdir)
        ksm_user, ksm_kc = service_account(cp, "ksm", KSM_RULES, workdir)
        res["identities"] = {"exporter": exp_user + " (the chart's ClusterRole rules: get/list/watch)",
                             "ksm": ksm_user + " (list/watch leases)"}
        if args.ksm_facts == "yes":
            facts_user, facts_kc = service_account(cp, "ksm-facts", KSM_FACTS_RULES, workdir)
            res["identities"]["ksm_facts"] = facts_user + (" (list/watch leases, CRDs, terraformmachines, "
                                                           "terraformclusters)")
            gv = cp.kube.get("/apis/infrastructure.cluster.x-k8s.io").json()["preferredVersion"]["version"]
            facts_cfg = workdir / "ksm-facts.yaml"
            facts_cfg.write_text(ksm_facts_config(gv))

        nss, objs = build_fleet(args.leases, args.held, args.namespaces)
        for ns in nss:
            cp.kube.namespace(ns)
        log(f"creating {len(objs)} objects ({args.leases} Leases, {args.held} held, and their TerraformMachines) "
            f"with {args.workers} parallel POSTs")
        secs = create_parallel(cp, objs, args.workers)
        res["fleet"] = {"objects": len(objs), "leases": args.leases, "held": args.held,
                        "namespaces": args.namespaces, "create_s": round(secs, 1),
                        "create_per_s": round(len(objs) / secs, 1)}
        log(f"created in {secs:.1f} s ({len(objs) / secs:.0f}/s)")
        listed, cont = 0, None
        while True:  # the API server gives no remainingItemCount for a selector: page through
            page = cp.kube.list("leases", None, labelSelector="tfstate=true", limit=1000,
                                **({"continue": cont} if cont else {}))
            listed += len(page["items"])
            cont = page["metadata"].get("continue")
            if not cont:
                break
        if listed != args.leases:
            raise RuntimeError(f"the API server lists {listed} lock Leases, not {args.leases}")
        if not args.cold_caches:
            res["warm_watch_caches_s"] = warm_watch_caches(cp)
            log(f"watch caches warm: {res['warm_watch_caches_s']}")

        # ---- the exporter ----
        port = free_port()
        env = exporter_env()
        def launch_exporter() -> subprocess.Popen:
            return start([str(exporter_bin), "--kubeconfig", str(exp_kc), "--listen-address", f"127.0.0.1:{port}",
                          "--plain-http", "--auth=none", "--log-format", "json", "--log-level", "info"],
                         workdir / "exporter.log", env=env)

        def exporter_ready(s: Scraper) -> bool:
            _, status, _, _ = s.get("/readyz", "*/*", "identity")
            if status != 200:
                return False
            return exporter_complete(s.metrics()[1], args.leases, args.held)
        earlier = [start_only("exporter", launch_exporter, port, exporter_ready, cp=cp, user=exp_user, args=args)
                   for _ in range(args.starts - 1)]
        m0, t0 = mark(cp), time.monotonic()
        p = launch_exporter()
        try:
            r = measure("exporter", p, port, exporter_ready, cp=cp, user=exp_user, args=args, t_start=t0, mark=m0)
        finally:
            stop(p)
        fold_starts(r, earlier)
        res["series"]["exporter"] = series_per_lease_exporter(r.pop("_text"), args.leases)
        anchor = workdir / "anchor"
        anchor.mkdir(exist_ok=True)
        (anchor / "body.plain").write_bytes(r.pop("_plain"))
        (anchor / "body.gzip").write_bytes(r.pop("_gzip"))
        (anchor / "content-type").write_text(r["content_type"] or "text/plain")
        res["tools"]["exporter"] = r

        # ---- kube-state-metrics ----
        def run_ksm(name: str, extra: list[str], rows: set[str] | None, *, starts: int = 1,
                    user: str = ksm_user, kubeconfig: Path = ksm_kc,
                    machines: bool = False) -> dict[str, Any]:
            port, tport = free_port(), free_port()

            def launch() -> subprocess.Popen:
                return start([str(ksm_bin), f"--kubeconfig={kubeconfig}", "--resources=leases",
                              "--host=127.0.0.1", f"--port={port}", "--telemetry-host=127.0.0.1",
                              f"--telemetry-port={tport}", *extra], workdir / f"{name}.log")

            def ready(s: Scraper) -> bool:
                body = s.metrics()[1]
                if count_lock_series(body, "kube_lease_owner") != args.leases:
                    return False
                # with the facts: every TerraformMachine's lock timeout too
                return not machines or body.count(b"\ncaptf_terraformmachine_lock_timeout_seconds{") == args.leases
            earlier = [start_only(name, launch, port, ready, cp=cp, user=user, args=args)
                       for _ in range(starts - 1)]
            m0, t0 = mark(cp), time.monotonic()
            p = launch()
            try:
                r = measure(name, p, port, ready, cp=cp, user=user, args=args, t_start=t0, mark=m0, rows=rows)
            finally:
                stop(p)
            fold_starts(r, earlier)
            return r

        r = run_ksm("ksm", [], None, starts=args.starts)
        res["series"]["ksm"] = series_per_lease_ksm(r.pop("_text"), args.leases)
        r.pop("_plain"), r.pop("_gzip")
        res["tools"]["ksm"] = r
        if args.ksm_gzip == "yes":
            r = run_ksm("ksm_gzip", ["--enable-gzip-encoding"], {"sizes", "seq", "concurrent"})
            for k in ("_plain", "_gzip", "_text"):
                r.pop(k, None)
            res["tools"]["ksm_gzip"] = r
        if args.ksm_facts == "yes":
            r = run_ksm("ksm_facts", [f"--custom-resource-state-config-file={facts_cfg}"], None,
                        starts=args.starts, user=facts_user, kubeconfig=facts_kc, machines=True)
            res["series"]["ksm_facts"] = series_per_lease_ksm(r.pop("_text"), args.leases)
            r.pop("_plain"), r.pop("_gzip")
            res["tools"]["ksm_facts"] = r

        # ---- the static anchor ----
        port = free_port()
        m0, t0 = mark(cp), time.monotonic()
        p = start([sys.executable, str(Path(__file__).resolve()), "--serve-static", str(anchor), "--port", str(port)],
                  workdir / "static.log")
        try:
            r = measure("static", p, port, lambda s: s.get("/readyz", "*/*", "identity")[1] == 200,
                        cp=cp, user=None, args=args, t_start=t0, mark=m0)
        finally:
            stop(p)
        for k in ("_plain", "_gzip", "_text"):
            r.pop(k, None)
        res["tools"]["static"] = r
    finally:
        stop_all()
        cp.stop()
        shutil.rmtree(workdir / "controlplane" / "etcd-data", ignore_errors=True)

    table = fmt_table(res)
    res["table"] = table
    print(table)
    print()
    ex, ks = res["series"]["exporter"], res["series"]["ksm"]
    print(f"series per Lease: exporter {ex['series_per_object']:g} per object "
          f"(held {ex['series_per_held_lease']:g}, free {ex['series_per_free_lease']:g}): "
          + ", ".join(f"{k} {v}" for k, v in ex["families_per_object"].items()))
    print(f"                  KSM {ks['series_per_lease']:g}: "
          + ", ".join(f"{k} {v}" for k, v in ks["families_per_lease"].items()))
    for tool in ("exporter", "ksm", *(("ksm_facts",) if "ksm_facts" in res["tools"] else ())):
        a = res["tools"][tool].get("api_rest", {})
        print(f"API at rest, {tool}: {a.get('requests')} requests in {res['tools'][tool].get('idle_window_s')} s: "
              f"{a.get('by_verb_resource')}")
        b = res["tools"][tool].get("api_to_ready", {})
        print(f"API to ready, {tool}: {b.get('requests')} requests: {b.get('by_verb_resource')}")
    print(f"KSM series of the cluster's other Leases: {ks['series_of_other_leases']}")
    print(f"fleet: {res['fleet']}; identities: {res['identities']}")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
        log(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
