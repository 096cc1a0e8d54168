"""A real Prometheus and Alertmanager (Debian's ``prometheus`` and ``prometheus-alertmanager`` by
default, or any other build given by path, e.g. Prometheus 3 from tools/prometheus3) on 127.0.0.1, each a ``ManagedProcess`` stopped by its PID, and the Prometheus HTTP API calls the tests
make (standard library only: tools/dashboards/live_check.py runs without the test requirements).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping

from pykit import REPO
from pykit.net import free_port, http_ok
from pykit.process import ManagedProcess

#: Prints every query of a dashboard as a JSON line (variables resolved against a Prometheus).
QUERIES_PY = REPO / "tools" / "dashboards" / "queries.py"


class PromAPI:
    """The few Prometheus HTTP API calls the tests need."""

    def __init__(self, base: str):
        self.base = base

    def raw(self, path: str, **params: Any) -> dict[str, Any]:
        """GET /api/v1/<path>: the JSON body, also when the status is an error."""
        return self._request(path, params)[1]

    def _request(self, path: str, params: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def _get(self, path: str, **params: Any) -> Any:
        code, body = self._request(path, params)
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus {path} {params}: HTTP {code}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("query", **params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def matrix(self, expr: str) -> list[dict[str, Any]]:
        """An instant query of a range selector (raw samples)."""
        data = self._get("query", query=expr)
        assert data["resultType"] == "matrix", data
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self._get("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)
        return data["result"]

    def value(self, expr: str) -> float | None:
        """The value of a query that returns at most one series (None when empty)."""
        res = self.query(expr)
        if not res:
            return None
        assert len(res) == 1, f"{expr} returned {len(res)} series: {res}"
        return float(res[0]["value"][1])

    def alerts(self) -> list[dict[str, Any]]:
        return self._get("alerts")["alerts"]

    def rules(self) -> list[dict[str, Any]]:
        return self._get("rules")["groups"]

    def targets(self) -> list[dict[str, Any]]:
        return self._get("targets")["activeTargets"]

    def targets_metadata(self, metric: str) -> list[dict[str, Any]]:
        """/api/v1/targets/metadata for one metric family name: what each target's scrape parsed
        (the family name, type, help and unit as the exposition format named them)."""
        return self._get("targets/metadata", metric=metric)

    def ready(self) -> bool:
        return http_ok(f"{self.base}/-/ready")


class Server(ManagedProcess):
    """A Prometheus or Alertmanager process listening on ``url``."""

    def __init__(self, name: str, argv: list[str], log_path: Path, port: int):
        super().__init__(name, argv, log_path)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.api = PromAPI(self.url)


def start_prometheus(workdir: Path, config: Mapping[str, Any], *, binary: str = "prometheus",
                     promtool: str = "promtool", log_level: str = "info",
                     check_config: bool = False) -> Server:
    """Prometheus with ``config`` (written as JSON, which is YAML, to workdir/prometheus.yml), its
    TSDB in workdir/prometheus-data and its log in workdir/prometheus.log, on a free port.
    ``check_config`` runs ``<promtool> check config`` on the file first."""
    port = free_port()
    cfg = workdir / "prometheus.yml"
    cfg.write_text(json.dumps(config, indent=1))
    if check_config:
        check = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise AssertionError(f"promtool check config failed:\n{check.stdout}{check.stderr}")
    (workdir / "prometheus-data").mkdir()
    return Server("prometheus", [
        binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address=127.0.0.1:{port}", f"--log.level={log_level}",
    ], workdir / "prometheus.log", port).start()


def start_alertmanager(workdir: Path, webhook_url: str, *,
                       binary: str = "prometheus-alertmanager", amtool: str | None = None) -> Server:
    """Alertmanager sending every alert, grouped by all its labels, to ``webhook_url`` within about
    a second (resolved ones too); no cluster; state in workdir/alertmanager-data, log in
    workdir/alertmanager.log, on a free port. ``amtool`` checks the configuration first."""
    port = free_port()
    cfg = workdir / "alertmanager.yml"
    cfg.write_text(json.dumps({
        "route": {
            "receiver": "webhook",
            # '...' = group by every label: one notification per alert, so each delivery
            # time belongs to exactly one alert.
            "group_by": ["..."],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{
            "name": "webhook",
            "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
        }],
    }, indent=1))
    if amtool is not None:
        check = subprocess.run([amtool, "check-config", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise AssertionError(f"amtool check-config failed:\n{check.stdout}{check.stderr}")
    (workdir / "alertmanager-data").mkdir()
    return Server("alertmanager", [
        binary, f"--config.file={cfg}", f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
        "--log.level=info",
    ], workdir / "alertmanager.log", port).start()


def dashboard_queries(prometheus_url: str, dashboards: Iterable[Path],
                      variables: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every query of ``dashboards`` as tools/dashboards/queries.py prints it (one dict per panel
    target: dashboard, panel_id, panel, refId, expr, instant), variables resolved against the
    Prometheus at ``prometheus_url`` (``$__rate_interval`` as 1m) unless given in ``variables``."""
    args = [sys.executable, str(QUERIES_PY), "--prometheus", prometheus_url, "--rate-interval", "1m"]
    for k, v in (variables or {}).items():
        args += ["--var", f"{k}={v}"]
    files = [str(f) for f in dashboards]
    out = subprocess.run(args + files, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"queries.py {' '.join(files)} failed: {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
