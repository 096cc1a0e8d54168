"""Real watch behaviour (docs/contract.md 8.1): a first sync by one streaming watch-list per resource
where the server streams them (else, and with --watch-list=false, lists paged with limit/continue), a
server whose WatchList feature is off listed in pages, quiet watches kept alive by bookmarks (no
request at rest, none restarted by the silence limit) and resumed past timeoutSeconds without a
relist, an etcd compaction plus a kube-apiserver restart forcing a relist (410), an etcd restart, a
kube-apiserver restart.  After each the exposition converges to the truth; the convergence times and
the audit-log counts go into the session report.  CAPTF_KUBE=old runs them on the older server."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest
import requests

from conftest import REPORT, RESOURCES, wait_all_up
from pykit.net import wait_for
from pykit.builders import lease, lease_name, lock_lease, pod, runner_pod_name, state_suffix, terraform_object
from pykit.controlplane import KUBE_MINOR, KUBE_VERSION, ControlPlane, Kube, audit_time
from pykit.exporter import E, Exporter, Metrics, wait_metric, wait_samples

M = "TerraformMachine"


def _query(uri: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlparse(uri).query)


def lists_and_watches(cp: ControlPlane, user: str, since: float) -> dict[str, dict[str, list[dict]]]:
    out: dict[str, dict[str, list[dict]]] = {r: {"list": [], "watch": []} for r in RESOURCES}
    for r in cp.requests_of(user, since):
        res = (r.get("objectRef") or {}).get("resource")
        if res in out and r["verb"] in ("list", "watch"):
            out[res][r["verb"]].append(r)
    return out


def whole_syncs(lw: dict[str, dict[str, list[dict]]], r: str) -> list[dict]:
    """The requests that fetched a whole state of ``r``: LISTs and streaming watch-lists answered
    200 (a server with WatchList off refuses a watch-list with 422: no sync)."""
    ok = [x for x in lw[r]["list"] + lw[r]["watch"] if (x.get("responseStatus") or {}).get("code") == 200]
    return [x for x in ok if x["verb"] == "list" or _query(x["requestURI"]).get("sendInitialEvents") == ["true"]]


def sync_modes(m: Metrics) -> dict[str, dict[str, float]]:
    return {r: {mode: m.get("captf_lock_exporter_watch_syncs_total", resource=r, mode=mode) or 0
                for mode in ("stream", "paged")} for r in RESOURCES}


#: kube-apiserver streams watch-lists where its WatchList feature is on: off by default in 1.33
#: (`--help`: "WatchList=true|false (BETA - default=false)"), on in 1.36, the two versions tested
STREAMS = KUBE_MINOR > 33


def errors(m: Metrics) -> dict[tuple[str, str], float]:
    return {(l["resource"], l["reason"]): v for l, v in m.all("captf_lock_exporter_watch_errors_total") if v}


def create_parallel(cp: ControlPlane, objs: list[dict[str, Any]], workers: int = 6) -> None:
    local = threading.local()

    def one(o: dict[str, Any]) -> None:
        if not hasattr(local, "kube"):
            local.kube = Kube(cp.url, cp.admin_token, cp.ca_file)
        local.kube.create(o)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(one, objs))


def test_lists_of_more_than_500_are_paged(cp: ControlPlane, kube: Kube, ns: str, install,
                                          start_exporter: Callable[..., Exporter]) -> None:
    n = 620
    held = 40
    objs: list[dict[str, Any]] = []
    for i in range(n):
        name = f"m{i:04d}"
        objs.append(terraform_object(M, ns, name))
        if i < held:
            objs.append(lock_lease(ns, M, name, who=f"alice@ws{i}"))
        else:
            objs.append(lease(ns, state_suffix(ns, M, name), owner_kind=M, owner_name=name))
        objs.append(pod(ns, runner_pod_name(M, name, "plan", 1), "Pending", kind=M, owner=name))
    t = time.monotonic()
    create_parallel(cp, objs)
    REPORT["paging_objects_created"] = {"objects": len(objs), "seconds": round(time.monotonic() - t, 1)}
    since = time.time() - 1
    t = time.monotonic()
    exp = start_exporter(extra_args=("--watch-list", "false"))
    # The per-class overview and the per-object lines are rendered from two reads of the index in
    # one update, so while the Leases still arrive a body may show the overview a change ahead of
    # a bucket (the next update, moments later, renders that bucket): wait for both to agree.
    m = wait_metric(exp, lambda m: len(m.all("captf_state_lock_held", namespace=ns)) == n
                    and m.get("captf_state_locks_held", **{"class": "foreign"}) == held
                    and sum(1 for _, v in m.all("captf_state_lock_held", namespace=ns) if v == 1) == held, 120,
                    f"{n} objects and {held} held locks, per object and per class")
    REPORT["paging_first_sync_s"] = round(time.monotonic() - t, 1)
    assert all(v["stream"] == 0 and v["paged"] >= 1 for v in sync_modes(m).values()), sync_modes(m)
    lw = lists_and_watches(cp, install.user, since)
    pages: dict[str, Any] = {}
    for r in ("leases", "pods", "terraformmachines"):
        ls = lw[r]["list"]
        limits = {q.get("limit", [""])[0] for q in (_query(x["requestURI"]) for x in ls)}
        conts = [x for x in ls if "continue" in _query(x["requestURI"])]
        pages[r] = {"list_requests": len(ls), "with_continue": len(conts), "limit": sorted(limits)}
        assert conts, f"{r}: {n} objects listed without a continue token: {[x['requestURI'] for x in ls]}"
        assert all(x["responseStatus"]["code"] == 200 for x in ls), r
    REPORT["paging"] = pages
    exp.stop()

    # The default: one streaming watch-list per resource, no LIST, where the server streams them.
    since = time.time()
    t = time.monotonic()
    exp = start_exporter()
    m = wait_metric(exp, lambda m: len(m.all("captf_state_lock_held", namespace=ns)) == n
                    and m.get("captf_state_locks_held", **{"class": "foreign"}) == held, 120,
                    f"{n} objects and {held} held locks, default start")
    took = round(time.monotonic() - t, 1)
    lw = lists_and_watches(cp, install.user, since)
    modes = sync_modes(m)
    firsts = {r: _query(lw[r]["watch"][0]["requestURI"]) for r in RESOURCES if lw[r]["watch"]}
    REPORT["watch_list_first_sync"] = {
        "kube_apiserver": KUBE_VERSION, "first_sync_s": took, "modes": modes,
        "lists": {r: len(lw[r]["list"]) for r in RESOURCES},
        "first_watch_status": {r: lw[r]["watch"][0]["responseStatus"]["code"] for r in RESOURCES if lw[r]["watch"]}}
    if STREAMS:
        for r in RESOURCES:
            assert lw[r]["list"] == [], f"{r}: a LIST although the server streams: {lw[r]['list'][:2]}"
            q = firsts[r]
            assert q.get("sendInitialEvents") == ["true"] and q.get("resourceVersionMatch") == ["NotOlderThan"] \
                and q.get("allowWatchBookmarks") == ["true"], (r, q)
            assert 300 <= int(q["timeoutSeconds"][0]) < 600, (r, q)
            assert modes[r] == {"stream": 1, "paged": 0}, (r, modes)
        assert "does not stream watch-lists" not in exp.log_text()
    else:
        assert all(modes[r]["paged"] >= 1 for r in RESOURCES), modes
        assert "does not stream watch-lists" in exp.log_text()


def test_a_server_with_watch_list_off_is_listed_in_pages(cp: ControlPlane, kube: Kube, ns: str, install,
                                                       start_exporter: Callable[..., Exporter],
                                                       tmp_path) -> None:
    """A second kube-apiserver on the same etcd with its WatchList feature off refuses the
    watch-list (422): every watch lists in pages, said once in the log, counted as mode=paged."""
    from test_network import kubeconfig, second_apiserver
    from pykit.exporter import Exporter as Exp, exporter_bin
    kube.create(terraform_object(M, ns, "web"))
    kube.create(lock_lease(ns, M, "web", who="alice@laptop"))
    try:
        b = second_apiserver(cp, tmp_path / "apiserver-nowl", ["--feature-gates=WatchList=false"])
    except Exception as e:  # a version where the gate is locked on refuses the flag and exits
        pytest.skip(f"kube-apiserver {KUBE_VERSION} does not start with WatchList=false: {e}")
    try:
        try:
            cp.wait_other_ready(b, "kube-apiserver with WatchList=false")
        except Exception as e:
            if b.returncode() is not None:
                pytest.skip(f"kube-apiserver {KUBE_VERSION} does not run with WatchList=false: {b.log_text()[-400:]}")
            raise
        exp = Exp(exporter_bin(), kubeconfig(cp, tmp_path / "kc-b", b.url, {"token": install.token}),
                  tmp_path / "exporter-b.log", log_level="info,captf_lock_exporter=debug")
        exp.start()
        try:
            exp.wait_healthy()
            wait_all_up(exp)
            m = wait_samples(exp, [E("captf_state_lock_held", 1, namespace=ns, kind=M, name="web")], 30, "synced")
            modes = sync_modes(m)
            assert all(v == {"stream": 0, "paged": 1} for v in modes.values()), modes
            logs = [l for l in exp.json_logs() if "does not stream watch-lists" in json.dumps(l)]
            assert len(logs) == 1, logs
            assert "refused" in json.dumps(logs[0]), logs[0]
            REPORT["watch_list_off_fallback"] = {"kube_apiserver": KUBE_VERSION, "modes": modes,
                                                 "log": logs[0].get("fields", logs[0])}
        finally:
            exp.stop()
    finally:
        b.stop()


def test_an_exporter_at_rest_makes_no_request(cp: ControlPlane, kube: Kube, ns: str, install,
                                              start_exporter: Callable[..., Exporter]) -> None:
    """Nothing changes for 150 s, twice the 75 s silence limit, with the default 5-10 min watch
    timeouts: no request at all reaches the server (audit log), no watch is restarted by the
    silence limit, watch_up stays 1. The Leases' last success still moves: the server's own
    identity Lease renews every 10 s, so its watch cache sends bookmarks (about one a minute);
    a resource nothing writes gets none (measured: its last success stays, docs/decisions/watch-start.md)."""
    kube.create(terraform_object(M, ns, "web"))
    kube.create(lock_lease(ns, M, "web", who="alice@laptop"))
    exp = start_exporter()
    wait_samples(exp, [E("captf_state_lock_held", 1, namespace=ns, kind=M, name="web")], 30, "synced")
    # At rest means after the start: on a server that does not stream watch-lists (1.33) a
    # resource falls back to a paged list only after its watch-list shows it is an ordinary
    # watch, so its LIST and watch come later than the Leases'. Wait (bounded) until every watch
    # is up and the exporter has sent nothing for 10 s.
    wait_all_up(exp, timeout=90)

    def quiet() -> bool:
        last = cp.requests_of(install.user, time.time() - 60)
        return not last or time.time() - audit_time(last[-1]["requestReceivedTimestamp"]) >= 10

    wait_for(quiet, 90, "the exporter's start-up requests to end")
    m0 = exp.scrape()
    since = time.time()
    t0 = time.monotonic()
    downs: list[tuple[float, str]] = []
    while time.monotonic() - t0 < 150:
        m = exp.scrape()
        for r in RESOURCES:
            if m.get("captf_lock_exporter_watch_up", resource=r) != 1:
                downs.append((round(time.monotonic() - t0, 1), r))
        time.sleep(5)  # sampling the window, not waiting for a result
    window = time.monotonic() - t0
    m1 = exp.scrape()
    reqs = cp.requests_of(install.user, since)
    assert downs == [], f"watch_up dropped at rest: {downs[:10]}"
    assert errors(m1) == errors(m0), (errors(m0), errors(m1))
    silent = [l for l in exp.json_logs() if "watch silent" in json.dumps(l)]
    assert silent == [], f"a healthy quiet watch was restarted by the silence limit: {silent[:3]}"
    assert reqs == [], [(r["verb"], r["requestURI"]) for r in reqs]
    moved = {}
    for r in RESOURCES:
        before = m0.get("captf_lock_exporter_watch_last_success_timestamp_seconds", resource=r)
        after = m1.get("captf_lock_exporter_watch_last_success_timestamp_seconds", resource=r)
        moved[r] = round(after - before, 1)
    REPORT["at_rest"] = {"kube_apiserver": KUBE_VERSION, "window_s": round(window, 1), "requests": len(reqs),
                         "last_success_moved_s": moved}
    # contract 7.4: the last success moves with bookmarks, also when nothing of ours changes
    assert moved["leases"] >= 50, moved


def test_quiet_watch_resumed_past_its_timeout_without_a_relist(cp: ControlPlane, kube: Kube, ns: str, install,
                                                               start_exporter: Callable[..., Exporter]) -> None:
    """Watch timeouts of 30-60 s (--watch-timeout 30s): each watch is ended by the server and
    resumed from a newer resourceVersion (a bookmark's), never synced whole again; watch_up stays 1."""
    kube.create(terraform_object(M, ns, "web"))
    kube.create(lock_lease(ns, M, "web", who="alice@laptop"))
    since = time.time()
    exp = start_exporter(extra_args=("--watch-timeout", "30s"))
    wait_samples(exp, [E("captf_state_lock_held", 1, namespace=ns, kind=M, name="web")], 30, "synced")
    m0 = exp.scrape()
    t0 = time.monotonic()
    downs: list[tuple[float, str]] = []

    def resumed_twice() -> bool:
        m = exp.scrape()
        for r in RESOURCES:
            if m.get("captf_lock_exporter_watch_up", resource=r) != 1:
                downs.append((time.monotonic() - t0, r))
        lw = lists_and_watches(cp, install.user, since)
        return all(len(lw[r]["watch"]) >= 3 for r in RESOURCES)
    from pykit.net import wait_for
    wait_for(resumed_twice, 240, "two watch restarts per resource", interval=1.0)
    window = time.monotonic() - t0
    m1 = exp.scrape()
    lw = lists_and_watches(cp, install.user, since)
    assert downs == [], f"watch_up dropped during a quiet period: {downs[:10]}"
    assert all(len(whole_syncs(lw, r)) == 1 for r in RESOURCES), {r: len(whole_syncs(lw, r)) for r in RESOURCES}
    assert errors(m1) == errors(m0), (errors(m0), errors(m1))
    detail = {}
    advanced = 0
    for r in RESOURCES:
        qs = [_query(x["requestURI"]) for x in lw[r]["watch"]]
        assert all(q.get("allowWatchBookmarks") == ["true"] for q in qs), (r, qs)
        resumed = [q for q in qs if q.get("sendInitialEvents") != ["true"]]
        assert all(30 <= int(q["timeoutSeconds"][0]) < 60 for q in qs), (r, qs)
        rvs = [int(q["resourceVersion"][0]) for q in resumed if q.get("resourceVersion")]
        assert len(rvs) == len(resumed) >= 2, (r, qs)
        detail[r] = {"watches": len(qs), "resourceVersions": rvs, "timeoutSeconds": [q["timeoutSeconds"][0] for q in qs]}
        advanced += rvs[-1] > rvs[0]
    # the kube-apiserver's own identity Lease renews every 10 s, so the store's revision moves while
    # none of the exporter's objects change: a watch resumed from a newer revision got a bookmark
    assert advanced >= 1, detail
    reqs = cp.requests_of(install.user, since)
    REPORT["quiet_watch"] = {"window_s": round(window, 1), "resumed_from_newer_rv": advanced,
                             "requests": len(reqs),
                             "detail": {r: {k: v for k, v in d.items() if k != "resourceVersions"}
                                        for r, d in detail.items()}}


def _restart_scenario(cp: ControlPlane, kube: Kube, ns: str, exp: Exporter, what: str,
                      disrupt: Callable[[], None], expect_down: bool) -> dict[str, Any]:
    """Lock ``before`` held; ``disrupt()``; then release ``before`` and take ``after``; measure until
    the exposition shows both and every watch is up."""
    kube.create(terraform_object(M, ns, "before"))
    kube.create(terraform_object(M, ns, "after"))
    kube.create(lock_lease(ns, M, "before", who="alice@laptop"))
    kube.create(lease(ns, state_suffix(ns, M, "after"), owner_kind=M, owner_name="after"))
    wait_samples(exp, [E("captf_state_lock_held", 1, namespace=ns, kind=M, name="before"),
                       E("captf_state_lock_held", 0, namespace=ns, kind=M, name="after")], 30, "before")
    wait_all_up(exp)
    m0 = exp.scrape()
    t_disrupt = time.monotonic()
    disrupt()
    t_back = time.monotonic()
    kube.release_lock(ns, lease_name(state_suffix(ns, M, "before")))
    kube.patch("leases", ns, lease_name(state_suffix(ns, M, "after")), {
        "metadata": {"annotations": {"app.terraform.io/lock-info":
                                     '{"ID":"x1","Operation":"OperationTypeApply","Info":"","Who":"bob@desk",'
                                     '"Version":"1.9.8","Created":"2026-01-01T00:00:00Z","Path":""}'}},
        "spec": {"holderIdentity": "x1"}})
    wait_samples(exp, [E("captf_state_lock_held", 0, namespace=ns, kind=M, name="before"),
                       E("captf_state_lock_held", 1, namespace=ns, kind=M, name="after")], 120,
                 f"the changes after {what}")
    t_data = time.monotonic()
    wait_all_up(exp, timeout=120)
    t_up = time.monotonic()
    m1 = exp.scrape()
    delta = {k: v - errors(m0).get(k, 0) for k, v in errors(m1).items() if v - errors(m0).get(k, 0)}
    out = {"outage_s": round(t_back - t_disrupt, 1), "data_converged_after_back_s": round(t_data - t_back, 2),
           "all_watch_up_after_back_s": round(t_up - t_back, 2),
           "watch_errors_delta": {f"{r}/{reason}": v for (r, reason), v in sorted(delta.items())}}
    REPORT.setdefault("restarts", {})[what] = out
    return out


def test_kube_apiserver_restart(cp: ControlPlane, kube: Kube, ns: str, install, exporter: Exporter) -> None:
    since = time.time()

    def restart() -> None:
        cp.stop_apiserver()
        # the exporter notices the dead server: watch_up 0 (contract 8.1)
        wait_metric(exporter, lambda m: all(m.get("captf_lock_exporter_watch_up", resource=r) == 0
                                            for r in RESOURCES), 90, "watch_up 0 while kube-apiserver is down")
        # contract 8.2: after start-up /readyz stays 200 and names every watch that is not up
        ready = exporter.get("/readyz")
        assert ready.status_code == 200, (ready.status_code, ready.text)
        assert all(r in ready.text for r in RESOURCES), ready.text
        cp.start_apiserver()
    out = _restart_scenario(cp, kube, ns, exporter, "kube-apiserver restart", restart, True)
    assert any(k.endswith("/transport") for k in out["watch_errors_delta"]), out
    lw = lists_and_watches(cp, install.user, since)
    out["relisted"] = [r for r in RESOURCES if whole_syncs(lw, r)]


def test_etcd_restart(cp: ControlPlane, kube: Kube, ns: str, install, exporter: Exporter) -> None:
    since = time.time()

    def restart() -> None:
        cp.stop_etcd()
        # kube-apiserver stays up and says etcd is gone
        from pykit.net import wait_for
        wait_for(lambda: kube.get("/readyz", timeout=5).status_code != 200, 60, "kube-apiserver not ready")
        cp.start_etcd()
        cp.wait_ready()
    out = _restart_scenario(cp, kube, ns, exporter, "etcd restart", restart, False)
    lw = lists_and_watches(cp, install.user, since)
    out["relisted"] = [r for r in RESOURCES if whole_syncs(lw, r)]


def test_compaction_and_apiserver_restart_force_a_relist(cp: ControlPlane, kube: Kube, ns: str, install,
                                                         exporter: Exporter) -> None:
    since = time.time()
    info: dict[str, Any] = {}

    def compact_and_restart() -> None:
        cp.stop_apiserver()
        # move etcd's revision past everything the exporter saw, then compact it away
        r = requests.post(cp.etcd.url + "/v3/kv/put", json={"key": base64.b64encode(b"/captf-test/bump").decode(),
                                                             "value": base64.b64encode(b"x").decode()}, timeout=10)
        r.raise_for_status()
        info["compacted_at"] = cp.compact_etcd()
        cp.start_apiserver()
    out = _restart_scenario(cp, kube, ns, exporter, "etcd compaction + kube-apiserver restart",
                            compact_and_restart, True)
    lw = lists_and_watches(cp, install.user, since)
    relisted = [r for r in RESOURCES if whole_syncs(lw, r)]
    gone_watches = [r for r in RESOURCES for w in lw[r]["watch"] if (w.get("responseStatus") or {}).get("code") == 410]
    out.update(relisted=relisted, compacted_at=info["compacted_at"], http_410_watches=sorted(set(gone_watches)))
    assert set(relisted) == set(RESOURCES), f"every resource must relist after its resourceVersion expired: {out}"
    assert any(k.endswith("/gone") for k in out["watch_errors_delta"]), \
        f"410 must be counted as reason=gone (docs/contract.md 7.4): {out}"
