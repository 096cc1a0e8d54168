"""Python test kit shared by the integration suite (tests/integration), the end-to-end test
(tests/e2e) and the dashboard live check (tools/dashboards/live_check.py).

Modules (the first four use the standard library only):

* ``process``      -- ``ManagedProcess``: a binary as a subprocess, log to a file, stopped by PID.
* ``net``          -- ``free_port``, ``wait_for`` (deadline polling), ``http_ok``.
* ``prometheus``   -- a real Prometheus / Alertmanager on 127.0.0.1, and ``PromAPI``.
* ``aioloop``      -- ``LoopThread``: an asyncio loop serving from a daemon thread.
* ``builders``     -- Kubernetes objects as CAPTF and the Terraform backend write them.
* ``kube``         -- ``KubeEmulator``: kmock's Kubernetes emulator on a real port.
* ``exporter``     -- ``Exporter``: the captf-lock-exporter binary; scrapes and expectations.
* ``diagnostics``  -- ``on_failure``: what a failed test reports (logs, requests), registered by fixtures.
* ``pytest_hooks`` -- the pytest plugin that attaches those reports to failed tests.

How a suite finds it: tests/integration/pytest.ini and tests/e2e/pytest.ini put ``tests/`` on
``sys.path`` (pytest's ``pythonpath`` option); live_check.py inserts it itself.
"""

from pathlib import Path

#: The repository's root directory.
REPO = Path(__file__).resolve().parents[2]
