"""Honest health under API failure: the real binary behind a fault-injecting proxy (faults.py).

Each test starts the exporter with a kubeconfig that names the proxy, lets it sync, injects one
fault on every request (a hung API server; a sustained 503; a sustained 429 with Retry-After),
changes the locks in the emulator while the fault lasts, then lets the API answer again. It
asserts on /metrics, /readyz and the exporter's log:

* detection: ``captf_lock_exporter_watch_up{resource="leases"}`` drops to 0, the failure is counted
  in ``captf_lock_exporter_watch_errors_total{resource="leases",reason}`` with the right reason, and a
  warning naming leases is logged; ``watch_last_success_timestamp_seconds`` stops advancing;
* for the sustained statuses: watch_up stays 0 on every scrape while the fault lasts, and every
  failed lease request the proxy answered is counted (no retry hidden inside the client);
* recovery: watch_up is 1 again within 10 s of the first good answer (and 30 s of the switch back),
  and the metrics show the locks as they are now, not as they were before the fault.

The exporter behaviour asserted (issue 7 section 1): no retries inside the kube client; every failed
list/watch request counted (5xx ``server_error``, 429 ``throttled``, no answer within 20 s
``timeout``); watch_up 0 on the first failure and 1 on the next success; watches ask for
``timeoutSeconds=60`` (the proxy ends them then, as an API server does) and are restarted after
60 s + 15 s without anything received; backoff capped at 10 s; /readyz keeps its start-up meaning
(200 once synced).  Measured times are printed and listed in the terminal summary.
"""

from __future__ import annotations

import json
import time
from typing import Callable

import pytest

from faults import FaultProxy
from pykit.builders import lease_name, lock_lease, state_suffix, terraform_object
from pykit.exporter import E, LATENCIES, Exporter, Metrics, wait_metric, wait_samples
from pykit.kube import KubeEmulator
from pykit.net import wait_for

NS = "faults"
M = "TerraformMachine"
RES = "leases"

UP = "captf_lock_exporter_watch_up"
ERRORS = "captf_lock_exporter_watch_errors_total"
LAST_SUCCESS = "captf_lock_exporter_watch_last_success_timestamp_seconds"

#: A hung API after sync must be visible within this (issue 7: two minutes).
HUNG_DETECT_S = 120.0
#: A 503/429 answer is immediate; the first failed request follows the end of the open watch at once.
STATUS_DETECT_S = 15.0
#: How long a sustained 503/429 lasts.
STATUS_FAULT_S = 40.0
#: At least this many failed lease requests must be counted during a sustained status (backoff <= 10 s).
MIN_COUNTED = 3
#: Recovery: watch_up 1 within this of the first good answer, and within RECOVER_S of the switch back.
RECOVER_AFTER_GOOD_S = 10.0
RECOVER_S = 30.0


def labels(name: str) -> dict[str, str]:
    return {"namespace": NS, "kind": M, "name": name}


def up(m: Metrics) -> float | None:
    return m.get(UP, resource=RES)


def errors(m: Metrics, reason: str) -> float:
    return m.get(ERRORS, resource=RES, reason=reason) or 0.0


def record(request: pytest.FixtureRequest, what: str, seconds: float) -> None:
    LATENCIES.append((request.node.name, what, seconds))
    print(f"\n[{request.node.name}] {what}: {seconds:.1f} s")


def lease_warnings(exp: Exporter, offset: int) -> list[str]:
    """WARN lines of the exporter's JSON log written after ``offset`` that mention leases."""
    out = []
    for line in exp.log_text()[offset:].splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if str(doc.get("level", "")).upper().startswith("WARN") and RES in line:
            out.append(line)
    return out


def readyz(exp: Exporter) -> tuple[int, str]:
    """/readyz keeps its start-up meaning: once synced it stays 200; watch health is in /metrics.
    It must also keep answering promptly while the API server misbehaves."""
    resp = exp.get("/readyz", timeout=5)
    assert resp.status_code == 200, f"/readyz answered {resp.status_code}: {resp.text!r}"
    assert resp.text.strip(), "/readyz answered an empty body"
    return resp.status_code, resp.text.strip()


def start_synced(kube: KubeEmulator, proxy: FaultProxy, start_exporter: Callable[..., Exporter]) -> Exporter:
    """web is locked, db is not; the exporter, behind the proxy, has synced and reports it."""
    kube.create(terraform_object(M, NS, "web"))
    kube.create(terraform_object(M, NS, "db"))
    kube.create(lock_lease(NS, M, "web", who="alice@laptop"))
    exp = start_exporter(upstream=proxy.url)
    wait_samples(exp, [
        E(UP, 1, resource=RES),
        E("captf_state_lock_info", 1, **labels("web"), **{"class": "foreign"}),
        E("captf_state_locks_held", 1, **{"class": "foreign"}),
    ], 20, "the exporter synced through the proxy")
    assert proxy.log(resource=RES), "the exporter's lease requests did not go through the proxy"
    readyz(exp)
    return exp


def change_locks(kube: KubeEmulator) -> None:
    """Release web's lock, take db's (written straight to the emulator, not through the proxy)."""
    kube.release_lock(NS, lease_name(state_suffix(NS, M, "web")))
    kube.create(lock_lease(NS, M, "db", who="bob@desk"))


def stale_view(m: Metrics) -> bool:
    """The scrape still shows the locks as they were before change_locks()."""
    return (m.get("captf_state_lock_held", **labels("web")) == 1
            and m.get("captf_state_lock_held", **labels("db")) in (None, 0.0))


TRUTH = [
    E("captf_state_lock_held", 0, **labels("web")),
    E("captf_state_lock_info", None, **labels("web")),
    E("captf_state_lock_held", 1, **labels("db")),
    E("captf_state_lock_info", 1, **labels("db"), **{"class": "foreign"}),
    E("captf_state_locks_held", 1, **{"class": "foreign"}),
]


def recover(request: pytest.FixtureRequest, exp: Exporter, proxy: FaultProxy, fault: str) -> Metrics:
    """Switch the proxy back to pass; assert and print the recovery times; assert the truth."""
    wall_back = time.time()
    t_back = proxy.pass_()
    wait_metric(exp, lambda m: up(m) == 1, RECOVER_S,
                f"watch_up{{resource=\"{RES}\"}} 1 within {RECOVER_S:.0f} s of the API answering again")
    t_up = time.monotonic()
    good = [r.answered_at for r in proxy.log(resource=RES)
            if r.answered_at is not None and r.answered_at >= t_back and r.status is not None
            and 200 <= r.status < 300]
    assert good, "watch_up is 1 again but no lease request was answered since the switch back:\n" + \
        proxy.format_log(proxy.log(resource=RES))
    first_good = min(good)
    record(request, f"{fault}: recovery after the switch back (watch_up 1)", t_up - t_back)
    record(request, f"{fault}: recovery after the first good lease answer", t_up - first_good)
    assert t_up - first_good <= RECOVER_AFTER_GOOD_S, (
        f"watch_up came back {t_up - first_good:.1f} s after the first good lease answer "
        f"(limit {RECOVER_AFTER_GOOD_S:.0f} s)")
    m = wait_samples(exp, [E(UP, 1, resource=RES), *TRUTH], 20,
                     f"the locks as they are now after the {fault}")
    last = m.get(LAST_SUCCESS, resource=RES)
    assert last is not None and last >= int(wall_back) - 1, \
        f"{LAST_SUCCESS}{{resource=\"{RES}\"}} = {last} does not show the success after {wall_back:.0f}"
    readyz(exp)
    return m


def test_hung_api_after_sync(kube: KubeEmulator, fault_proxy: FaultProxy,
                             start_exporter: Callable[..., Exporter], request: pytest.FixtureRequest) -> None:
    proxy = fault_proxy
    exp = start_synced(kube, proxy, start_exporter)
    m0 = exp.scrape()
    timeouts0 = errors(m0, "timeout")
    log_offset = len(exp.log_text())

    wall_hang = time.time()
    t_hang = proxy.hang()
    deadline = t_hang + HUNG_DETECT_S
    change_locks(kube)  # the exporter cannot see this until the API answers again

    m = wait_metric(exp, lambda m: up(m) == 0, HUNG_DETECT_S,
                    f"watch_up{{resource=\"{RES}\"}} 0 within {HUNG_DETECT_S:.0f} s of the API hanging")
    detect = time.monotonic() - t_hang
    record(request, "hung API: detection (watch_up 0)", detect)
    assert stale_view(m), "the exporter saw the lock change although the proxy held every answer"

    left = max(1.0, deadline - time.monotonic())
    wait_for(lambda: lease_warnings(exp, log_offset), left, "a warning in the log that mentions leases")
    left = max(1.0, deadline - time.monotonic())
    m = wait_metric(exp, lambda m: errors(m, "timeout") > timeouts0, left,
                    f"{ERRORS}{{resource=\"{RES}\",reason=\"timeout\"}} to increase")
    record(request, "hung API: timeout counted", time.monotonic() - t_hang)
    last = m.get(LAST_SUCCESS, resource=RES)
    assert last is not None and last <= wall_hang + 1, \
        f"{LAST_SUCCESS}{{resource=\"{RES}\"}} = {last} advanced while the API was hung (since {wall_hang:.0f})"
    status, body = readyz(exp)
    print(f"/readyz during the hang: {status} {body!r}; warning: {lease_warnings(exp, log_offset)[0]}")
    held = proxy.log(since=t_hang, resource=RES)
    print(f"lease requests held by the hung proxy: {len(held)}")

    recover(request, exp, proxy, "hung API")


def sustained_status(kube: KubeEmulator, proxy: FaultProxy, start_exporter: Callable[..., Exporter],
                     request: pytest.FixtureRequest, code: int, reason: str, retry_after: int | None) -> None:
    fault = f"{code}" + (f" Retry-After {retry_after}" if retry_after is not None else "")
    exp = start_synced(kube, proxy, start_exporter)
    base = errors(exp.scrape(), reason)
    log_offset = len(exp.log_text())

    t0 = proxy.status(code, retry_after=retry_after)
    change_locks(kube)

    wait_metric(exp, lambda m: up(m) == 0 and errors(m, reason) > base, STATUS_DETECT_S,
                f"watch_up{{resource=\"{RES}\"}} 0 and reason=\"{reason}\" counted within "
                f"{STATUS_DETECT_S:.0f} s of the first {code}")
    record(request, f"{fault}: detection (watch_up 0, {reason} counted)", time.monotonic() - t0)

    # for as long as the fault lasts, every scrape says the watch is down and the count keeps rising
    scrapes, last_count = 0, base
    while time.monotonic() < t0 + STATUS_FAULT_S:
        m = exp.scrape()
        scrapes += 1
        assert up(m) == 0, f"watch_up{{resource=\"{RES}\"}} is {up(m)} " \
            f"{time.monotonic() - t0:.1f} s into a sustained {code}"
        assert stale_view(m), "the exporter saw the lock change although every answer was an error"
        count = errors(m, reason)
        assert count >= last_count, f"the {reason} counter went down: {last_count} -> {count}"
        last_count = count
        time.sleep(0.5)  # sampling interval of the scrapes, not a wait for a condition
    readyz(exp)
    counted = last_count - base
    answered = [r for r in proxy.log(since=t0, resource=RES) if r.status == code]
    gaps = [round(b.t - a.t, 1) for a, b in zip(answered, answered[1:])]
    print(f"\n{fault} for {STATUS_FAULT_S:.0f} s: {scrapes} scrapes all watch_up 0; {reason} counted "
          f"{counted:.0f}; lease requests answered {code}: {len(answered)}; gaps between them (s): {gaps}")
    assert counted >= MIN_COUNTED, f"only {counted:.0f} {reason} failures counted in {STATUS_FAULT_S:.0f} s " \
        f"(at least {MIN_COUNTED}); lease requests answered {code}: {len(answered)}"
    assert lease_warnings(exp, log_offset), f"no warning mentioning {RES} logged during the {code}"

    m = recover(request, exp, proxy, fault)
    # every lease request the proxy failed was counted once: no retry hidden inside the client
    answered = [r for r in proxy.log(since=t0, resource=RES) if r.status == code]
    assert errors(m, reason) - base == len(answered), (
        f"{reason} counted {errors(m, reason) - base:.0f} times, the proxy answered {code} to "
        f"{len(answered)} lease requests")


def test_sustained_503(kube: KubeEmulator, fault_proxy: FaultProxy, start_exporter: Callable[..., Exporter],
                       request: pytest.FixtureRequest) -> None:
    sustained_status(kube, fault_proxy, start_exporter, request, 503, "server_error", None)


def test_sustained_429_with_retry_after(kube: KubeEmulator, fault_proxy: FaultProxy,
                                        start_exporter: Callable[..., Exporter],
                                        request: pytest.FixtureRequest) -> None:
    sustained_status(kube, fault_proxy, start_exporter, request, 429, "throttled", 2)
