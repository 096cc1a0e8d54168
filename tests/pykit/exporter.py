"""The captf-lock-exporter binary as a ``ManagedProcess``, its parsed ``/metrics``, and waits on
expected samples.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import requests
from prometheus_client.parser import text_string_to_metric_families

from pykit.net import WaitTimeout, free_port, wait_for
from pykit.process import ManagedProcess, ProcessDied

DEFAULT_EXPORTER_BIN = "/work/main/target/debug/captf-lock-exporter"

PROM_ACCEPT = "text/plain; version=0.0.4"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"



def exporter_bin() -> str:
    """The binary under test: $EXPORTER_BIN, else DEFAULT_EXPORTER_BIN."""
    return os.environ.get("EXPORTER_BIN", DEFAULT_EXPORTER_BIN)


class ExporterDied(ProcessDied):
    pass


@dataclass
class Metrics:
    """Parsed samples of one scrape."""

    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    text: str = ""

    def all(self, name: str, /, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(l, v) for (n, l, v) in self.samples
                if n == name and all(l.get(k) == str(val) for k, val in labels.items())]

    def get(self, name: str, /, **labels: str) -> float | None:
        """Value of the one sample matching name and (a subset of) labels; None if absent."""
        found = self.all(name, **labels)
        if not found:
            return None
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}: {found}")
        return found[0][1]

    sample = get  # sample(name, **labels): the value, or None when absent

    def labels(self, name: str, /, **labels: str) -> dict[str, str] | None:
        found = self.all(name, **labels)
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}: {found}")
        return found[0][0] if found else None

    def names(self) -> set[str]:
        return {n for (n, _, _) in self.samples}


class Exporter(ManagedProcess):
    """The captf-lock-exporter binary as a subprocess on a free 127.0.0.1 port, JSON logs at
    ``log_level``, with an environment cleared of Kubernetes and exporter settings."""

    died = ExporterDied
    stop_timeout = 10.0

    def __init__(self, binary: str, kubeconfig: Path, log_path: Path, extra_args: Iterable[str] = (),
                 log_level: str = "debug", secure: bool = False, token: str | None = None,
                 ca: str | None = None, idle_objects: bool = True):
        """``secure=False`` (most tests): plain HTTP without authentication (``--plain-http
        --auth=none``), added unless ``extra_args`` choose the endpoint themselves.
        ``secure=True``: the production default, HTTPS with Kubernetes authentication; scrapes
        send ``token`` as a bearer token and verify the certificate with ``ca`` (a PEM path), or
        skip verification when ``ca`` is None (the self-signed certificate).
        ``idle_objects=True`` (most tests, which read objects with nothing to tell):
        ``--export-idle-objects``; False: the default exposition, series only for objects with
        something to tell (docs/decisions/series-that-say-something.md)."""
        super().__init__("exporter", [binary], log_path)
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.extra_args = list(extra_args)
        self.log_level = log_level
        self.secure = secure
        self.idle_objects = idle_objects
        self.port = 0
        self.http = requests.Session()
        if secure:
            # Not from the environment: with REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE set, requests
            # would prefer them over the session's own CA.
            self.http.trust_env = False
            self.http.verify = ca if ca else False
            if token:
                self.http.headers["Authorization"] = f"Bearer {token}"

    @property
    def url(self) -> str:
        return f"{'https' if self.secure else 'http'}://127.0.0.1:{self.port}"

    def endpoint_args(self) -> list[str]:
        """The flags that choose the endpoint, unless the test gave its own."""
        if self.secure or any(a.startswith(("--plain-http", "--auth", "--tls-")) for a in self.extra_args):
            return []
        return ["--plain-http", "--auth=none"]

    def start(self) -> "Exporter":
        if not os.access(self.binary, os.X_OK):
            raise FileNotFoundError(f"exporter binary {self.binary} not found or not executable "
                                    "(build it with `cargo build`, or set EXPORTER_BIN)")
        self.port = free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("KUBERNETES_", "CAPTF_LOCK_EXPORTER_"))
               and k not in ("KUBECONFIG", "RUST_LOG")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        env.setdefault("RUST_BACKTRACE", "1")
        self.env = env
        self.argv = [self.binary, "--kubeconfig", str(self.kubeconfig),
                     "--listen-address", f"127.0.0.1:{self.port}",
                     "--log-format", "json", "--log-level", self.log_level, *self.endpoint_args(),
                     *(["--export-idle-objects"] if self.idle_objects else []), *self.extra_args]
        super().start()
        return self

    def wait_healthy(self, timeout: float = 20.0) -> None:
        def ok() -> bool:
            self.check_alive()
            return self.http.get(self.url + "/healthz", timeout=2).status_code == 200

        wait_for(ok, timeout, "exporter /healthz to answer 200")

    def get(self, path: str, **kw: Any) -> requests.Response:
        self.check_alive()
        kw.setdefault("timeout", 5)
        return self.http.get(self.url + path, **kw)

    def scrape(self) -> Metrics:
        """GET /metrics in the Prometheus 0.0.4 text format and parse every sample."""
        resp = self.get("/metrics", headers={"Accept": PROM_ACCEPT})
        resp.raise_for_status()
        text = resp.text
        samples = []
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                samples.append((s.name, dict(s.labels), float(s.value)))
        return Metrics(samples, text)

    def stop(self, timeout: float | None = None) -> int | None:
        self.http.close()
        return super().stop(timeout)

    def json_logs(self) -> list[dict[str, Any]]:
        """The JSON lines of the log, parsed (other lines skipped)."""
        out = []
        for line in self.log_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


def run_cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    """One command of the binary (``locks``, ``explain``...) with ``kubeconfig``, in an environment
    cleared of Kubernetes and exporter settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "CAPTF_LOCK_EXPORTER_"))
           and k != "KUBECONFIG"}
    return subprocess.run([exporter_bin(), "--kubeconfig", str(kubeconfig), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def start_healthy(make: Callable[[], Exporter], started: list[Exporter], attempts: int = 3) -> Exporter:
    """``make()`` started until it answers /healthz, every process kept in ``started`` (for the
    teardown). The free port found a moment ago may have been taken since: a bind error retires the
    process and starts another; any other death raises."""
    for attempt in range(attempts):
        exp = make()
        started.append(exp)
        exp.start()
        try:
            exp.wait_healthy()
            return exp
        except ExporterDied:
            if attempt == attempts - 1 or "in use" not in exp.log_text().lower():
                raise
            exp.retired = True
    raise ValueError(f"attempts must be at least 1, not {attempts}")


def wait_metric(exporter: Exporter, predicate: Callable[[Metrics], Any], timeout: float, what: str) -> Metrics:
    """Scrape until ``predicate(metrics)`` is truthy; returns the scrape that satisfied it."""
    holder: dict[str, Metrics] = {}

    def probe() -> Any:
        m = exporter.scrape()
        holder["m"] = m
        return predicate(m)

    try:
        wait_for(probe, timeout, what)
        return holder["m"]
    except WaitTimeout as e:
        m = holder.get("m")
        tail = ""
        if m is not None:
            lines = [l for l in m.text.splitlines() if l.startswith("captf_")]
            tail = "\nlast scrape (captf_* samples):\n" + "\n".join(lines[:200])
        raise WaitTimeout(f"{e}{tail}") from None


class _Present:
    def __repr__(self) -> str:
        return "PRESENT"


#: Expected value meaning "exactly one such sample, any value".
PRESENT: Any = _Present()


@dataclass(frozen=True)
class Expect:
    """One expected sample: ``value`` None means "no such sample", PRESENT "one, any value";
    labels are a subset match."""

    name: str
    labels: Mapping[str, str]
    value: float | None

    def actual(self, m: Metrics) -> Any:
        found = m.all(self.name, **self.labels)
        if not found:
            return None
        if len(found) > 1:
            return ("several", found)
        return found[0][1]

    def ok(self, m: Metrics) -> bool:
        actual = self.actual(m)
        if self.value is PRESENT:
            return isinstance(actual, float)
        return actual == self.value

    def __str__(self) -> str:
        lbl = ",".join(f'{k}="{v}"' for k, v in self.labels.items())
        want = "absent" if self.value is None else "present" if self.value is PRESENT else self.value
        return f"{self.name}{{{lbl}}} == {want}"


def E(name: str, value: Any, /, **labels: str) -> Expect:  # noqa: N802 - reads well in tests
    return Expect(name, labels, value)


def wait_samples(exporter: "Exporter", expects: Iterable[Expect], timeout: float = 20.0,
                 what: str = "") -> Metrics:
    """Scrape until every expectation holds; on timeout list the ones that do not, with actuals."""
    expects = list(expects)
    last: dict[str, Metrics] = {}

    def probe() -> bool:
        m = exporter.scrape()
        last["m"] = m
        return all(e.ok(m) for e in expects)

    try:
        wait_for(probe, timeout, what or f"{len(expects)} expected samples")
    except WaitTimeout as e:
        m = last.get("m")
        if m is None:
            raise
        bad = [f"  want {x}, got {x.actual(m)!r}" for x in expects if not x.ok(m)]
        lines = [l for l in m.text.splitlines() if l.startswith("captf_")]
        raise WaitTimeout(f"{e}\nunmet:\n" + "\n".join(bad) +
                          "\nlast scrape (captf_* samples):\n" + "\n".join(lines[:300])) from None
    return last["m"]


#: (test id, what, seconds) -- printed in the terminal summary by tests/integration/conftest.py.
LATENCIES: list[tuple[str, str, float]] = []
