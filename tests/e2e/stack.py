"""End-to-end stack: real Prometheus and Alertmanager around the real exporter (one or more replicas).

Two stacks (``Flavor``, chosen by tests/e2e/conftest.py): Debian's Prometheus 2.42 + Alertmanager
0.25 with one exporter replica, and Prometheus 3 + a current Alertmanager built from Go modules
(tools/prometheus3/build.sh) with two replicas, one of them scraped through a ``ScrapeTap``.

Builds on the shared test kit (tests/pykit): the kmock emulator, object builders, the ``Exporter``
wrapper, ``ManagedProcess``, the Prometheus/Alertmanager launchers, ``PromAPI`` and ``wait_for``
come from there.  Added here:

* ``WebhookReceiver`` -- http.server in a thread recording Alertmanager's webhook payloads.
* ``derive_short_for_rules`` -- the test copy of the shipped rules with shorter ``for:``
                         (programmatic, from the shipped file; everything but ``for`` proven equal).
* ``Clock``           -- deadline-polled waits that print how long each one took.
* ``Flavor``          -- which Prometheus/promtool/Alertmanager binaries, how many exporter replicas.
* ``ScrapeTap``       -- a byte-for-byte pass-through in front of one replica that records what
                         Prometheus asked for (Accept) and what the exporter answered (Content-Type).
* ``Stack``           -- every process of one run; the exporter runs with ``--log-level info``
                         (the integration suite runs debug; E2E_EXPORTER_LOG_LEVEL overrides it);
                         ``check_dashboards`` runs every dashboard query against its Prometheus.
"""

from __future__ import annotations

import copy
import datetime as dt
import http.client
import http.server
import json
import os
import re
import subprocess
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from pykit import REPO
from pykit.diagnostics import log_section
from pykit.exporter import Exporter
from pykit.kube import EXPORTER_ARGS as EMULATOR_ARGS, KubeEmulator, write_kubeconfig
from pykit.net import WaitTimeout, wait_for
from pykit.prometheus import PromAPI, Server, dashboard_queries, start_alertmanager, start_prometheus

SHIPPED_RULES = REPO / "alerts" / "captf-lock-exporter.rules.yaml"
PROM3_BUILD = REPO / "tools" / "prometheus3" / "build.sh"
DASHBOARDS = REPO / "dashboards"


# --------------------------------------------------------------------------------------------
# Which binaries: the stack flavours
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    """One Prometheus + Alertmanager pair and how the exporter is run around it."""

    id: str
    prometheus: str
    promtool: str
    alertmanager: str
    amtool: str | None
    replicas: int            # exporter replicas, every one a scrape target of the same job
    prom_log_level: str      # 3.x logs "using fallback setting" for a content type only at debug
    tap: bool                # scrape the last replica through a ScrapeTap

    def version(self, binary: str) -> str:
        """``X.Y.Z`` from ``<binary> --version`` (prometheus, alertmanager, promtool, amtool)."""
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        m = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
        if out.returncode != 0 or not m:
            raise AssertionError(f"{binary} --version: rc {out.returncode}: {out.stdout}{out.stderr}")
        return m.group(1)


@dataclass(frozen=True)
class Secure:
    """The production endpoint: HTTPS with a certificate from files (issued by the test CA) and
    Kubernetes authentication; Prometheus scrapes with a ServiceAccount token bound to the chart's
    metrics-reader ClusterRole and verifies the certificate with the CA."""

    cert: Path
    key: Path
    ca: Path
    token: str
    token_file: Path


def prom3_paths() -> dict[str, str]:
    """The Prometheus 3 / Alertmanager binaries: $PROM3_PROMETHEUS, $PROM3_PROMTOOL,
    $PROM3_ALERTMANAGER, $PROM3_AMTOOL, else the version-keyed cache that
    tools/prometheus3/build.sh fills (asked with --print-env, which builds nothing)."""
    keys = ("PROM3_PROMETHEUS", "PROM3_PROMTOOL", "PROM3_ALERTMANAGER", "PROM3_AMTOOL")
    if all(os.environ.get(k) for k in keys):
        return {k: os.environ[k] for k in keys}
    out = subprocess.run(["bash", str(PROM3_BUILD), "--print-env"], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise FileNotFoundError(f"Prometheus 3 binaries not built: run {PROM3_BUILD.relative_to(REPO)} "
                                f"(or set {', '.join(keys)}):\n{out.stdout}{out.stderr}")
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return {k: os.environ.get(k) or env[k] for k in keys}


class _LocalServer:
    """A threaded HTTP server on 127.0.0.1 (any free port) that records what went wrong in
    ``errors``; subclasses give the handler and keep their records under ``_lock``."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _serve(self, handler: type[http.server.BaseHTTPRequestHandler], name: str,
               tls: ssl.SSLContext | None = None) -> None:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


# --------------------------------------------------------------------------------------------
# Scrape tap: what Prometheus asked for, what the exporter answered
# --------------------------------------------------------------------------------------------


@dataclass
class TappedScrape:
    path: str
    accept: str
    accept_encoding: str
    user_agent: str
    status: int
    content_type: str
    content_encoding: str
    body_bytes: int


class ScrapeTap(_LocalServer):
    """An HTTP pass-through on 127.0.0.1 in front of one exporter replica: every GET is forwarded
    with Prometheus' own request headers, and the exporter's status, headers and body are returned
    unchanged (byte for byte, compressed or not). Each exchange is recorded."""

    FORWARD = ("Accept", "Accept-Encoding", "User-Agent", "X-Prometheus-Scrape-Timeout-Seconds",
               "Authorization")
    RETURN = ("Content-Type", "Content-Encoding", "Content-Length")

    def __init__(self, upstream_port: int, secure: Secure | None = None) -> None:
        """With ``secure`` the tap serves HTTPS with the exporter's certificate and forwards over
        HTTPS (CA verified), Prometheus' bearer token included."""
        super().__init__()
        self.upstream_port = upstream_port
        self.secure = secure
        self.scrapes: list[TappedScrape] = []

    def start(self) -> "ScrapeTap":
        tap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                headers = {h: self.headers[h] for h in tap.FORWARD if self.headers.get(h) is not None}
                try:
                    if tap.secure is not None:
                        ctx = ssl.create_default_context(cafile=str(tap.secure.ca))
                        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                            "127.0.0.1", tap.upstream_port, timeout=10, context=ctx)
                    else:
                        conn = http.client.HTTPConnection("127.0.0.1", tap.upstream_port, timeout=10)
                    conn.request("GET", self.path, headers=headers)
                    resp = conn.getresponse()
                    body = resp.read()
                    conn.close()
                except OSError as e:
                    with tap._lock:
                        tap.errors.append(f"GET {self.path}: {e!r}")
                    self.send_error(502)
                    return
                with tap._lock:
                    tap.scrapes.append(TappedScrape(
                        self.path, headers.get("Accept", ""), headers.get("Accept-Encoding", ""),
                        headers.get("User-Agent", ""), resp.status, resp.getheader("Content-Type", ""),
                        resp.getheader("Content-Encoding", ""), len(body)))
                self.send_response(resp.status)
                for h in tap.RETURN:
                    if h != "Content-Length" and resp.getheader(h) is not None:
                        self.send_header(h, resp.getheader(h))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        sctx = None
        if self.secure is not None:
            sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            sctx.load_cert_chain(str(self.secure.cert), str(self.secure.key))
        self._serve(Handler, "scrape-tap", sctx)
        return self

    def recorded(self) -> list[TappedScrape]:
        with self._lock:
            return list(self.scrapes)


# --------------------------------------------------------------------------------------------
# Webhook receiver
# --------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    mono: float           # time.monotonic() when the POST arrived
    wall: float           # time.time() when the POST arrived
    payload: dict[str, Any]


@dataclass
class DeliveredAlert:
    delivery: Delivery
    alert: dict[str, Any]  # one entry of payload["alerts"]

    @property
    def labels(self) -> dict[str, str]:
        return self.alert.get("labels", {})

    @property
    def status(self) -> str:
        return self.alert.get("status", "")


class WebhookReceiver(_LocalServer):
    """Records every JSON payload POSTed to it (Alertmanager's webhook_config)."""

    def __init__(self) -> None:
        super().__init__()
        self.deliveries: list[Delivery] = []

    def start(self) -> "WebhookReceiver":
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                mono, wall = time.monotonic(), time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body)
                except ValueError as e:
                    with receiver._lock:
                        receiver.errors.append(f"undecodable POST {self.path}: {e}: {body[:200]!r}")
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.deliveries.append(Delivery(mono, wall, payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._serve(Handler, "webhook")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    def alerts(self) -> list[DeliveredAlert]:
        with self._lock:
            return [DeliveredAlert(d, a) for d in self.deliveries for a in d.payload.get("alerts", [])]

    def find(self, alertname: str, status: str, **labels: str) -> DeliveredAlert | None:
        """The first delivered alert with that name, status and (subset of) labels."""
        for a in self.alerts():
            if (a.labels.get("alertname") == alertname and a.status == status
                    and all(a.labels.get(k) == v for k, v in labels.items())):
                return a
        return None


# --------------------------------------------------------------------------------------------
# Rules: the test copy with shorter `for`
# --------------------------------------------------------------------------------------------

DERIVED_GROUP_SUFFIX = "-e2e-short-for"
#: The one label the test copy of a rule adds. Without it the copy and the shipped rule write the
#: same ALERTS / ALERTS_FOR_STATE series from two groups; when their 1 s evaluations cross (a loaded
#: machine) Prometheus refuses the older sample and marks the shipped rule unhealthy ("out of order
#: sample"), which is the harness's doing, not the rule's.
DERIVED_LABEL = ("e2e_copy", "short-for")


def parse_duration(s: str) -> float:
    """Prometheus duration (e.g. 1m, 15m, 1h30m, 10s) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"not a Prometheus duration: {s!r}")
    return sum(int(n) * units[u] for n, u in parts)


def derive_short_for_rules(shipped: Path, out: Path, shorten: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Write a rule file holding only the alerts in ``shorten``, copied from ``shipped`` with ``for``
    replaced by the given shorter duration, in a group named ``<shipped group>-e2e-short-for``, and
    one label more (``DERIVED_LABEL``, so that its series are its own).

    The copy is made from the parsed shipped file, never typed by hand, and re-read afterwards:
    every key of every copied rule except ``for`` and that label must equal the shipped one (same
    expr, labels, annotations).  Returns {alert: (shipped for, test for)}.
    """
    doc = yaml.safe_load(shipped.read_text())
    changed: dict[str, tuple[str, str]] = {}
    groups = []
    for g in doc["groups"]:
        rules = []
        for r in g["rules"]:
            name = r.get("alert")
            if name not in shorten:
                continue
            old = r.get("for")
            if old is None or parse_duration(shorten[name]) >= parse_duration(old):
                raise ValueError(f"{name}: test for {shorten[name]!r} does not shorten shipped for {old!r}")
            new = copy.deepcopy(r)
            new["for"] = shorten[name]
            new["labels"] = {**new.get("labels", {}), DERIVED_LABEL[0]: DERIVED_LABEL[1]}
            rules.append(new)
            changed[name] = (old, shorten[name])
        if rules:
            grp = {k: copy.deepcopy(v) for k, v in g.items() if k != "rules"}
            grp["name"] = g["name"] + DERIVED_GROUP_SUFFIX
            grp["rules"] = rules
            groups.append(grp)
    missing = set(shorten) - set(changed)
    if missing:
        raise ValueError(f"alerts not in {shipped}: {sorted(missing)}")
    header = (
        f"# GENERATED by tests/e2e at run time from {shipped.name}: the alerts below are copied\n"
        "# from the shipped file with only `for:` shortened, so that the end-to-end test can see\n"
        "# them fire, and the label " + f"{DERIVED_LABEL[0]}: {DERIVED_LABEL[1]}" + " added so that their ALERTS series\n"
        "# are not the shipped rules'. Everything else (expr, labels, annotations) is the shipped text.\n"
        + "".join(f"#   {a}: for {o} -> {n}\n" for a, (o, n) in changed.items())
    )
    out.write_text(header + yaml.safe_dump({"groups": groups}, sort_keys=False, width=10_000,
                                           allow_unicode=True))
    # Prove it: re-read both files, compare every copied rule key by key except `for`.
    shipped_rules = {r["alert"]: r for g in yaml.safe_load(shipped.read_text())["groups"]
                     for r in g["rules"] if "alert" in r}
    for g in yaml.safe_load(out.read_text())["groups"]:
        for r in g["rules"]:
            orig = shipped_rules[r["alert"]]
            a = {k: v for k, v in r.items() if k != "for"}
            a["labels"] = {k: v for k, v in a["labels"].items() if k != DERIVED_LABEL[0]}
            b = {k: v for k, v in orig.items() if k != "for"}
            assert r["labels"][DERIVED_LABEL[0]] == DERIVED_LABEL[1]
            if a != b:
                raise AssertionError(f"derived {r['alert']} differs from the shipped rule beyond `for`")
            assert r["for"] == shorten[r["alert"]]
    return changed


# --------------------------------------------------------------------------------------------
# Timed waits
# --------------------------------------------------------------------------------------------


@dataclass
class Clock:
    """Deadline-polled waits, each printed with how long it took."""

    t0: float = field(default_factory=time.monotonic)
    waits: list[tuple[str, float]] = field(default_factory=list)
    guards: list[Callable[[], None]] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def log(self, msg: str) -> None:
        print(f"[e2e +{self.now():6.2f}s] {msg}", flush=True)

    def wait(self, what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
        def guarded() -> Any:
            for g in self.guards:  # a dead process fails the wait at once (ProcessDied is not retried)
                g()
            return predicate()

        start = time.monotonic()
        try:
            val = wait_for(guarded, timeout, what, interval)
        except WaitTimeout:
            self.log(f"TIMED OUT after {time.monotonic() - start:.2f}s (deadline {timeout:.0f}s): {what}")
            raise
        took = time.monotonic() - start
        self.waits.append((what, took))
        self.log(f"waited {took:6.2f}s (deadline {timeout:.0f}s) for {what}")
        return val


def utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def parse_rfc3339(s: str) -> float:
    """Alertmanager/Prometheus timestamps (RFC 3339, nanoseconds, Z or offset) as epoch seconds."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        raise ValueError(f"not RFC 3339: {s!r}")
    base = dt.datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    return base.timestamp() + frac


def stop_all(items: Iterable[Any]) -> list[str]:
    """Stop everything, in the order given; returns error strings instead of raising."""
    errs = []
    for it in items:
        try:
            it.stop()
        except Exception as e:  # noqa: BLE001 - teardown keeps going
            errs.append(f"stopping {it!r}: {e!r}")
    return errs


# --------------------------------------------------------------------------------------------
# The stack
# --------------------------------------------------------------------------------------------


class Stack:
    """Every process and server of one end-to-end run; ``stop()`` ends them all by PID.

    The Kubernetes API is a parameter: ``start_kube`` starts kmock's emulator (what the scenario
    writes through: ``create``, ``patch``, ``release_lock``; ``watchers``/``exporter_requests``
    for diagnostics), or ``use_kube(api, kubeconfig)`` takes any object with those write methods
    and a kubeconfig the exporter replicas read (a real kube-apiserver's, for instance).
    """

    def __init__(self, tmp: Path, clock: Clock, flavor: Flavor | None = None):
        self.tmp = tmp
        self.clock = clock
        self.flavor = flavor
        self.kube: Any = None
        self.kubeconfig: Path | None = None
        self.secure: Secure | None = None
        self.exporters: list[Exporter] = []
        self.tap: ScrapeTap | None = None
        self.webhook: WebhookReceiver | None = None
        self.alertmanager: Server | None = None
        self.prometheus: Server | None = None
        self.prom: PromAPI | None = None
        self.am_url = ""
        self.prom_url = ""

    @property
    def exporter(self) -> Exporter | None:
        """The first replica (the only one in a one-replica run)."""
        return self.exporters[0] if self.exporters else None

    # -- starts -----------------------------------------------------------------------------

    def start_kube(self, resources: Iterable[str]) -> KubeEmulator:
        self.kube = KubeEmulator(tuple(resources)).start()
        self.kubeconfig = write_kubeconfig(self.tmp / "kubeconfig", self.kube.url)
        self.clock.log(f"kmock emulator on {self.kube.url}")
        return self.kube

    def use_kube(self, api: Any, kubeconfig: Path, secure: Secure | None = None) -> Any:
        """An API server started elsewhere: ``api`` is what the scenario writes through, the
        exporter replicas read ``kubeconfig``.  ``stop()`` stops ``api`` if it has ``stop``."""
        self.kube, self.kubeconfig, self.secure = api, kubeconfig, secure
        self.clock.log(f"Kubernetes API from {kubeconfig}" + (", endpoint HTTPS + tokens" if secure else ""))
        return api

    def start_exporter(self, binary: str, replicas: int = 1) -> Exporter:
        """``replicas`` exporter processes on the same API server (each its own port and log,
        ``exporter-N.log``); with ``flavor.tap`` the last one is scraped through a ScrapeTap."""
        assert self.kube is not None and self.kubeconfig is not None
        level = os.environ.get("E2E_EXPORTER_LOG_LEVEL", "info")
        for i in range(1, replicas + 1):
            log_path = self.tmp / ("exporter.log" if replicas == 1 else f"exporter-{i}.log")
            if self.secure is not None:
                sec = self.secure
                e = Exporter(binary, self.kubeconfig, log_path, log_level=level, secure=True,
                             token=sec.token, ca=str(sec.ca),
                             extra_args=("--tls-cert-file", str(sec.cert), "--tls-key-file", str(sec.key)))
            else:
                extra = EMULATOR_ARGS if isinstance(self.kube, KubeEmulator) else ()
                e = Exporter(binary, self.kubeconfig, log_path, log_level=level, extra_args=extra)
            if replicas > 1:
                e.name = f"exporter-{i}"
            e.start()
            self.exporters.append(e)
            self.clock.guards.append(e.check_alive)
            self.clock.log(f"{e.name} pid {e.pid} on {e.url}")
        if self.flavor is not None and self.flavor.tap and replicas > 1:
            self.tap = ScrapeTap(self.exporters[-1].port, self.secure).start()
            self.clock.log(f"scrape tap on 127.0.0.1:{self.tap.port} -> {self.exporters[-1].name}")
        return self.exporters[0]

    def scrape_targets(self) -> list[str]:
        """host:port of every replica as Prometheus scrapes it (the tap's for the tapped one)."""
        targets = [f"127.0.0.1:{e.port}" for e in self.exporters]
        if self.tap is not None:
            targets[-1] = f"127.0.0.1:{self.tap.port}"
        return targets

    def start_webhook(self) -> WebhookReceiver:
        self.webhook = WebhookReceiver().start()
        self.clock.log(f"webhook receiver on {self.webhook.url}")
        return self.webhook

    def start_alertmanager(self, binary: str = "prometheus-alertmanager", amtool: str | None = None) -> Server:
        assert self.webhook is not None
        self.alertmanager = start_alertmanager(self.tmp, self.webhook.url, binary=binary, amtool=amtool)
        self.am_url = self.alertmanager.url
        self.clock.guards.append(self.alertmanager.check_alive)
        self.clock.log(f"alertmanager pid {self.alertmanager.pid} on {self.am_url}")
        return self.alertmanager

    def start_prometheus(self, rule_files: list[Path], binary: str = "prometheus",
                         promtool: str = "promtool", log_level: str = "info") -> Server:
        """The same configuration for 2.x and 3.x: no ``scrape_protocols`` and no
        ``fallback_scrape_protocol`` (each version offers its default Accept list, and the
        exporter's Content-Type must be one it parses without a fallback)."""
        assert self.exporters and self.am_url
        self.prometheus = start_prometheus(self.tmp, {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "alerting": {"alertmanagers": [{
                "api_version": "v2",
                "static_configs": [{"targets": [self.am_url.removeprefix("http://")]}],
            }]},
            "scrape_configs": [{
                "job_name": "captf-lock-exporter",
                "honor_labels": True,
                "static_configs": [{"targets": self.scrape_targets()}],
                **({"scheme": "https",
                    "tls_config": {"ca_file": str(self.secure.ca)},
                    "authorization": {"type": "Bearer", "credentials_file": str(self.secure.token_file)}}
                   if self.secure is not None else {}),
            }],
        }, binary=binary, promtool=promtool, log_level=log_level, check_config=True)
        self.prom_url = self.prometheus.url
        self.prom = self.prometheus.api
        self.clock.guards.append(self.prometheus.check_alive)
        self.clock.log(f"prometheus pid {self.prometheus.pid} on {self.prom_url}")
        return self.prometheus

    # -- checks -----------------------------------------------------------------------------

    def check_dashboards(self, pins: Mapping[str, str]) -> list[str]:
        """Run tools/dashboards/queries.py against this Prometheus; every query must return series.

        Single-value variables named in ``pins`` take that value; multi-value ones stay "All"; the
        rest (`job`) are resolved by queries.py from Prometheus.  Returns a line per dashboard.
        """
        prom = self.prom
        assert prom is not None
        report: list[str] = []
        failures: list[str] = []
        t = time.monotonic()
        total = 0
        for f in sorted(DASHBOARDS.glob("*.json")):
            dash = json.loads(f.read_text())
            pinned = {v["name"]: pins[v["name"]] for v in (dash.get("templating") or {}).get("list") or []
                      if v.get("name") in pins and not (v.get("multi") or v.get("includeAll"))}
            queries = dashboard_queries(self.prom_url, [f], pinned)
            assert queries, f"queries.py printed no query for {f.name}"
            now = time.time()
            empty = []
            for q in queries:
                total += 1
                where = f"{f.name} panel {q['panel_id']} {q['panel']!r} {q['refId']}"
                try:
                    res = prom.query(q["expr"], at=now)
                except AssertionError as e:
                    failures.append(f"{where}: query error {e}\n    {q['expr']}")
                    continue
                if not res:
                    failures.append(f"{where}: no series (instant)\n    {q['expr']}")
                    empty.append(where)
                    continue
                if not q["instant"]:
                    rng = prom.query_range(q["expr"], now - 30, now, 1)
                    if not rng:
                        failures.append(f"{where}: no series (range, last 30 s)\n    {q['expr']}")
                        continue
            report.append(f"{f.name}: {len(queries)} queries, {len(queries) - len(empty)} with data"
                          + (f" (pinned {', '.join(f'{k}={v}' for k, v in pinned.items())})" if pinned else ""))
        self.clock.log(f"dashboards: {total} queries evaluated in {time.monotonic() - t:.2f}s")
        assert not failures, "dashboard queries without data or with errors:\n" + "\n".join(failures)
        return report

    # -- stop -------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Prometheus first (so it stops alerting), then Alertmanager, webhook, exporter, emulator."""
        self.clock.guards.clear()
        order = [x for x in (self.prometheus, self.alertmanager, self.webhook, self.tap, *self.exporters,
                             self.kube) if x is not None and hasattr(x, "stop")]
        t = time.monotonic()
        errs = stop_all(order)
        rcs = [f"{p.name} pid {p.pid} rc {p.returncode()}"
               for p in (self.prometheus, self.alertmanager, *self.exporters) if p is not None and p.proc is not None]
        self.clock.log(f"stopped everything in {time.monotonic() - t:.2f}s: {', '.join(rcs)}")
        return errs

    def failure_report(self, tail: int = 150) -> list[tuple[str, str]]:
        """Failure-report sections (pykit.diagnostics): process logs, emulator requests, webhook deliveries."""
        sections = [log_section(p, tail) for p in (*self.exporters, self.prometheus, self.alertmanager)
                    if p is not None]
        if self.kube is not None and hasattr(self.kube, "failure_report"):
            sections += self.kube.failure_report()
        if self.tap is not None:
            text = "\n".join(f"{t.status} {t.content_type!r} <- Accept {t.accept!r}" for t in self.tap.recorded()[-20:])
            sections.append(("scrape tap (last 20)", (text or "(none)") + "".join(f"\nERROR {e}" for e in self.tap.errors)))
        if self.webhook is not None:
            text = "\n".join(f"{a.status:8} {a.labels}" for a in self.webhook.alerts())
            sections.append(("webhook deliveries", text or "(none)"))
        return sections
