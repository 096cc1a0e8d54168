#!/usr/bin/env python3
"""Run every dashboard query against a real Prometheus scraping a fixture.

Two installations of the exporter (same job, told apart by the target's
namespace as a ServiceMonitor's targets are), each with two fake replicas,
serve the docs/contract.md section 7 metrics for fixed sets of locks (the
second installation's in namespace team-c), and a third target of the first
installation fails every scrape (a replica that is down). The first
installation's locks are: an own_live lock, an overdue
foreign lock, an unknown lock whose age is only observed, an unlocked object,
force-unlocks, CAPTF's conditions, a verdict mismatch, an active Job and a
pending TerraformPlan. A fake CAPTF controller (its own job) serves CAPTF's
per-kind force-unlock counter for one kind only, so the object dashboard's
comparison shows both the controller's numbers and its fallback. A real Prometheus (Debian `prometheus`, started here on
127.0.0.1 and stopped by its PID) scrapes them every second. Then every query
queries.py prints (variables resolved against that Prometheus, as the
end-to-end test does) must run without error and return data, and the
queries whose numbers matter must give the expected rows: one row per lock,
not one per replica, worst lock first, right counts.

This proves the PromQL works at run time (joins, duplicates, `and on`),
which a parser cannot. The end-to-end test (tests/e2e/) does the same against
the real exporter.

Usage: live_check.py [DASHBOARD.json ...]  (default: every dashboards/*.json)
Standard library and the standard-library part of the shared test kit tests/pykit
(process, net, prometheus). Exit 1 on any failure.
"""

import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests"))
from pykit.net import WaitTimeout, free_port, wait_for  # noqa: E402
from pykit.process import ProcessDied  # noqa: E402
from pykit.prometheus import dashboard_queries, start_prometheus  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
JOB = "captf-lock-exporter"
START = time.time()

# (namespace, kind, name, class, operation, holder, lock_id, version, age, age_source, overdue);
# age: how old the lock was when the check started (skew: its runner's clock ran an hour ahead,
# so it was taken an hour in the future and shows age 0).
LOCKS = [
    ("team-a", "TerraformMachine", "web", "own_live", "OperationTypeApply",
     "@captf-m-web-apply-a1-abc123-x7k2p", "1111", "1.9.0", 120, "lock_info", 0),
    ("team-a", "TerraformCluster", "prod", "foreign", "OperationTypePlan",
     "alice@laptop", "2222", "1.9.0", 900, "lock_info", 1),
    ("team-b", "TerraformMachinePool", "pool", "unknown", "", "", "abcd", "", 50, "observed", 0),
    ("team-b", "TerraformMachine", "skew", "own_stale", "OperationTypeApply",
     "@captf-m-skew-apply-a1-abc123-x7k2p", "5555", "1.9.0", -3600, "lock_info", 0),
]
# A second installation (another namespace's exporter, the same job): its own locks.
LOCKS_B = [
    ("team-c", "TerraformMachine", "c1", "own_live", "OperationTypeApply",
     "@captf-m-c1-apply-a1-abc123-x7k2p", "c111", "1.9.0", 30, "lock_info", 0),
    ("team-c", "TerraformMachine", "c2", "own_live", "OperationTypeApply",
     "@captf-m-c2-apply-a1-abc123-x7k2p", "c222", "1.9.0", 40, "lock_info", 0),
    ("team-c", "TerraformCluster", "c3", "foreign", "OperationTypePlan",
     "bob@laptop", "c333", "1.9.0", 60, "lock_info", 0),
]
INSTALLATIONS = {"a": "captf-system", "b": "captf-tenant"}  # the targets' namespace label
OBJECTS = [l[:3] for l in LOCKS] + [("team-b", "TerraformMachine", "db")]
LAST_FORCE_UNLOCK = {"web": 3600, "db": 7200, "prod": 86400}  # seconds ago; pool: never (0)
FORCE_UNLOCKS = {"web": 2, "db": 1, "prod": 1, "pool": 0, "skew": 0}
# CAPTF's StateReadable condition (status, reason) per object name; pool has none.
CONDITIONS = {"web": ("True", "StateRead"), "prod": ("False", "StateLocked"), "db": ("True", "StateRead")}
MISMATCH = {"pool"}          # verdict_mismatch 1; 0 for the other objects
JOB_ACTIVE = {"db"}          # status.activeJob set
PLANS = {"prod": "prod-7f3a9"}  # a Pending TerraformPlan naming the object
CLASSES = ["own_live", "own_stale", "foreign", "unknown", "own_unverified"]
RESOURCES = ["leases", "pods", "events", "terraformclusters", "terraformmachines",
             "terraformmachinepools", "terraformplans", "clusters"]
# Watch health per (installation, replica): resources whose watch is down, and how many
# seconds ago each watch last succeeded (0 = never). Installation a's replica 1 lost its
# pods watch 400 s ago while replica 0's is fine: the installation is not down. Installation
# b serves no TerraformMachinePool CRD: that watch never synced on either replica.
WATCH_DOWN = {("a", 1): {"pods"}, ("b", 0): {"terraformmachinepools"}, ("b", 1): {"terraformmachinepools"}}
LAST_SUCCESS_AGO = {("a", 0): {}, ("a", 1): {"pods": 400}, ("b", 0): {"terraformmachinepools": None},
                    ("b", 1): {"terraformmachinepools": None}}
LAST_SUCCESS_DEFAULT = {"a": 3, "b": 10}


def esc(v):
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**kw):
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kw.items()) + "}"


def acquired(lock, replica):
    return START - lock[8] - (replica * 0.5 if lock[9] == "observed" else 0)


def exposition(replica, install="a"):
    now = time.time()
    up_for = now - START
    out = []
    locks = LOCKS if install == "a" else LOCKS_B
    objects = OBJECTS if install == "a" else [l[:3] for l in LOCKS_B]

    def family(name, typ, samples):
        out.append(f"# TYPE {name} {typ}")
        for lab, val in samples:
            suffix = "_total" if typ == "counter" else ""
            out.append(f"{name}{suffix}{labels(**lab)} {val}")

    obj = lambda ns, k, n: {"namespace": ns, "kind": k, "name": n}
    family("captf_state_lock_info", "gauge", [
        ({**obj(*l[:3]), "class": l[3], "operation": l[4], "holder": l[5], "lock_id": l[6], "version": l[7]}, 1)
        for l in locks])
    # The exporter says when a lock was taken, not its age (the dashboards compute
    # time() - that). Replicas agree on a lock-info Created; an observed lock is dated
    # from when each replica first saw it, replica 1 half a second before replica 0.
    family("captf_state_lock_acquired_timestamp_seconds", "gauge", [
        ({**obj(*l[:3]), "class": l[3], "age_source": l[9]}, acquired(l, replica)) for l in locks])
    family("captf_state_lock_created_timestamp_seconds", "gauge", [
        (obj(*l[:3]), START - l[8]) for l in locks if l[9] == "lock_info"])
    family("captf_state_lock_overdue", "gauge", [({**obj(*l[:3]), "class": l[3]}, l[10]) for l in locks])
    held = {l[:3] for l in locks}
    family("captf_state_lock_held", "gauge", [(obj(*o), int(o in held)) for o in objects])
    family("captf_state_lock_timeout_seconds", "gauge", [(obj(*o), 300) for o in objects])
    family("captf_state_lock_deadline_seconds", "gauge", [(obj(*o), 3600) for o in objects])
    # web's counter goes up while the check runs, so increase() sees a change.
    family("captf_state_lock_force_unlocks", "counter", [
        (obj(*o), FORCE_UNLOCKS.get(o[2], 0) + (int(up_for // 2) if o[2] == "web" else 0)) for o in objects])
    family("captf_state_lock_last_force_unlock_timestamp_seconds", "gauge", [
        (obj(*o), (now - LAST_FORCE_UNLOCK[o[2]]) if o[2] in LAST_FORCE_UNLOCK else 0) for o in objects])
    family("captf_state_lock_captf_condition", "gauge", [
        ({**obj(*o), "status": CONDITIONS[o[2]][0], "reason": CONDITIONS[o[2]][1]}, 1)
        for o in objects if o[2] in CONDITIONS])
    family("captf_state_lock_verdict_mismatch", "gauge", [(obj(*o), int(o[2] in MISMATCH)) for o in objects])
    family("captf_state_lock_job_active", "gauge", [(obj(*o), 1) for o in objects if o[2] in JOB_ACTIVE])
    family("captf_state_lock_plan_pending", "gauge", [
        ({**obj(*o), "plan": PLANS[o[2]]}, 1) for o in objects if o[2] in PLANS])
    family("captf_state_locks_held", "gauge", [
        ({"class": c}, sum(1 for l in locks if l[3] == c)) for c in CLASSES])
    family("captf_lock_exporter_build_info", "gauge", [({"version": "0.1.0"}, 1)])
    down = WATCH_DOWN.get((install, replica), set())
    family("captf_lock_exporter_watch_up", "gauge", [({"resource": r}, int(r not in down)) for r in RESOURCES])
    ago = LAST_SUCCESS_AGO.get((install, replica), {})
    family("captf_lock_exporter_watch_last_success_timestamp_seconds", "gauge", [
        ({"resource": r}, 0 if r in ago and ago[r] is None else now - ago.get(r, LAST_SUCCESS_DEFAULT[install]))
        for r in RESOURCES])
    family("captf_lock_exporter_watch_events", "counter", [({"resource": r}, int(up_for * 3)) for r in RESOURCES])
    family("captf_lock_exporter_watch_errors", "counter", [({"resource": "pods", "reason": "watch_failed"}, 1)])
    family("captf_lock_exporter_pod_reads", "counter", [
        ({"result": r}, n) for r, n in (("found", 5), ("not_found", 2), ("error", 0))])
    return "\n".join(out) + "\n"


def controller_exposition():
    # CAPTF's controller: its counter exists only for kinds it has force-unlocked.
    up_for = time.time() - START
    return ("# TYPE captf_lock_force_unlocks_total counter\n"
            f'captf_lock_force_unlocks_total{{kind="TerraformMachine"}} {3 + int(up_for // 2)}\n')


def serve(replica, install="a"):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (controller_exposition() if replica == "controller" else exposition(replica, install)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    if not shutil.which("prometheus"):
        if os.environ.get("DASHBOARDS_SKIP_LIVE") == "1":
            print("live: prometheus not installed, skipped because DASHBOARDS_SKIP_LIVE=1")
            return 0
        print("live: prometheus not found: apt-get install --no-install-recommends prometheus"
              " (or DASHBOARDS_SKIP_LIVE=1 to skip on a workstation)")
        print("live: 0 passed, 1 failed")
        return 1
    t0 = time.time()
    replicas = [serve(0), serve(1)]
    replicas_b = [serve(0, "b"), serve(1, "b")]
    controller = serve("controller")
    # A replica that is down: nothing listens on this port.
    dead = free_port()
    addr = lambda srv: f"127.0.0.1:{srv.server_address[1]}"
    tmp = tempfile.mkdtemp(prefix="dash-live-")
    prom = start_prometheus(pathlib.Path(tmp), {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        # As a ServiceMonitor scrapes: honor_labels (the locks' own namespace wins), and the
        # target's namespace (the installation's) on the series that have none of their own.
        "scrape_configs": [{"job_name": JOB, "honor_labels": True, "static_configs": [
            {"targets": [addr(s) for s in replicas] + [f"127.0.0.1:{dead}"],
             "labels": {"namespace": INSTALLATIONS["a"]}},
            {"targets": [addr(s) for s in replicas_b], "labels": {"namespace": INSTALLATIONS["b"]}}]},
            {"job_name": "captf-controller-manager", "static_configs": [
                {"targets": [f"127.0.0.1:{controller.server_address[1]}"]}]}],
    }, log_level="warn")
    base, api = prom.url, prom.api.raw
    failures, passed = [], 0
    try:
        # Wait for both targets and enough samples for rate()/increase().
        def scraped_enough():
            prom.check_alive()
            r = api("query", query=f'min(count_over_time(up{{job="{JOB}"}}[1m])) and count(up{{job="{JOB}"}} == 1) == 4')
            res = r.get("data", {}).get("result", [])
            return res and float(res[0]["value"][1]) >= 4

        try:
            wait_for(scraped_enough, 60, "prometheus to scrape the four fixture replicas", interval=0.5)
        except ProcessDied as e:
            raise RuntimeError(str(e)) from None
        except WaitTimeout as e:
            raise RuntimeError(f"prometheus did not scrape the four fixture replicas within 60 s: {e}") from None

        try:
            queries = dashboard_queries(base, sys.argv[1:])
        except AssertionError as e:
            raise RuntimeError(str(e)) from None
        results = {}
        now = time.time()
        for item in queries:
            key = (item["dashboard"], item["panel_id"], item["refId"])
            where = f'{item["dashboard"]} panel {item["panel_id"]} {item["panel"]!r} {item["refId"]}'
            if item["instant"]:
                r = api("query", query=item["expr"], time=now)
            else:
                r = api("query_range", query=item["expr"], start=now - 30, end=now, step=2)
            if r.get("status") != "success":
                failures.append(f"{where}: {r.get('error')}\n      {item['expr']}")
                continue
            res = r["data"]["result"]
            if not res:
                failures.append(f"{where}: no data\n      {item['expr']}")
                continue
            results[key] = res
            passed += 1

        def rows(uid, pid, ref):
            return results.get((uid, pid, ref), [])

        def expect(what, ok):
            nonlocal passed
            if ok:
                passed += 1
            else:
                failures.append(f"expectation: {what}")

        M, D = "captf-state-locks", "captf-state-lock-object"
        last = lambda s: float(s["value"][1]) if "value" in s else float(s["values"][-1][1])
        ALL_LOCKS = LOCKS + LOCKS_B
        # held per class: each installation counted once (not once per replica), and the
        # installations added up (a: 1 own_live, b: 2 -> 3; not the max, 2)
        for ref, cls in zip("ABCDE", CLASSES):
            got = [last(s) for s in rows(M, 1, ref)]
            want = sum(1 for l in ALL_LOCKS if l[3] == cls)
            expect(f"held-by-class {cls} = {want} (both installations, each once), got {got}", got == [want])
        per_class = {s["metric"].get("class"): last(s) for s in rows(M, 5, "A")}
        want_pc = {c: sum(1 for l in ALL_LOCKS if l[3] == c) for c in CLASSES}
        expect(f"held per class over time sums the installations: {per_class} vs {want_pc}", per_class == want_pc)
        expect("overdue stat = 1", [last(s) for s in rows(M, 2, "A")] == [1])
        expect("exporter targets up = 4 (of 5)", [last(s) for s in rows(M, 3, "A")] == [4])
        # Health as the alerts see it: a's pods watch is down on one replica only (not down),
        # b's terraformmachinepools on both (down); a's dead target leaves it up.
        expect(f"watches down = 1 (b's terraformmachinepools, not a's replica 1): {[last(s) for s in rows(M, 3, 'B')]}",
               [last(s) for s in rows(M, 3, "B")] == [1])
        expect(f"exporters down = 0 while one target of a fails: {[last(s) for s in rows(M, 3, 'C')]}",
               [last(s) for s in rows(M, 3, "C")] == [0])
        synced = {s["metric"].get("resource"): last(s) for s in rows(M, 9, "A")}
        want_synced = {r: int(r != "terraformmachinepools") for r in RESOURCES}
        expect(f"watches synced per resource as CAPTFLockExporterWatchDown takes them (max over replicas): {synced}",
               synced == want_synced)
        # Data age: the freshest replica of each installation, the oldest installation.
        data_age = {s["metric"].get("resource"): last(s) for s in rows(M, 16, "A")}
        want_age_lo = {r: (LAST_SUCCESS_DEFAULT["a"] if r == "terraformmachinepools" else LAST_SUCCESS_DEFAULT["b"])
                       for r in RESOURCES}
        expect(f"data age per watch: b's 10 s (a's pods: its fresh replica's 3 s, not 400 s; b's never-synced "
               f"terraformmachinepools left out, so a's 3 s): {data_age}",
               set(data_age) == set(RESOURCES)
               # the fixture dates its sample a few ms after Prometheus' scrape timestamp
               and all(want_age_lo[r] - 0.5 <= data_age[r] < want_age_lo[r] + 3 for r in RESOURCES))
        # the held-locks table: one row per lock for every column query
        for ref in "ABCDE":
            names = sorted(s["metric"]["name"] for s in rows(M, 4, ref))
            expect(f"held-locks table {ref}: one row per held lock, got {names}", names == sorted(l[2] for l in ALL_LOCKS))
        order = [s["metric"]["name"] for s in sorted(rows(M, 4, "E"), key=last, reverse=True)]
        expect(f"held-locks sort key puts overdue first, then oldest: {order}",
               order == ["prod", "web", "c3", "pool", "c2", "c1", "skew"])
        ages = {s["metric"]["name"]: (s["metric"].get("age_source"), last(s)) for s in rows(M, 4, "B")}
        expect(f"pool's age is observed: {ages}", ages.get("pool", ("",))[0] == "observed")
        # Ages are time() - the acquired timestamp, the oldest replica's (min of acquired).
        want_age = {l[2]: max(0, now - min(acquired(l, r) for r in (0, 1))) for l in ALL_LOCKS}
        expect(f"held-locks table ages are now - acquired, the oldest replica's, never negative: {ages} vs {want_age}",
               set(ages) == set(want_age) and all(abs(ages[n][1] - want_age[n]) < 0.01 for n in want_age))
        lf = sorted(s["metric"]["name"] for s in rows(M, 7, "A"))
        expect(f"last force-unlock table lists web, db, prod (not pool): {lf}", lf == ["db", "prod", "web"])
        ts = {s["metric"]["name"]: last(s) for s in rows(M, 7, "A")}
        expect("last force-unlock is in milliseconds", abs(ts.get("web", 0) - (now - 3600) * 1000) < 120_000)
        fu = rows(M, 6, "A")
        expect(f"force-unlocks per namespace: {[s['metric'] for s in fu]}",
               {s["metric"].get("namespace") for s in fu} == {"team-a", "team-b", "team-c"})
        # drill-down resolved to the first namespace/kind/name: team-a TerraformCluster prod
        cls = [s["metric"].get("class") for s in rows(D, 2, "A")]
        expect(f"drill-down resolves team-a/TerraformCluster/prod (foreign): {cls}", cls == ["foreign"])
        expect("drill-down current lock table: one row", len(rows(D, 7, "A")) == 1 and len(rows(D, 7, "B")) == 1)
        prod_age = next(now - START + l[8] for l in LOCKS if l[2] == "prod")
        for pid in (3, 7, 8):
            ref = "B" if pid == 7 else "A"
            got = [last(s) for s in rows(D, pid, ref)]
            expect(f"drill-down panel {pid} shows prod's age {prod_age:.1f}: {got}",
                   len(got) == 1 and abs(got[0] - prod_age) < 0.01)
        cond = [(s["metric"].get("status"), s["metric"].get("reason")) for s in rows(D, 12, "A")]
        expect(f"drill-down CAPTF condition of prod is False/StateLocked, once: {cond}", cond == [("False", "StateLocked")])
        expect("drill-down verdict of prod: agree (0)", [last(s) for s in rows(D, 13, "A")] == [0])
        expect("drill-down Job active of prod: none, so the fallback 0", [last(s) for s in rows(D, 14, "A")] == [0])
        plans = [s["metric"].get("plan") for s in rows(D, 15, "A")]
        expect(f"drill-down pending plan of prod: {plans}", plans == ["prod-7f3a9"])
        ctl = {s["metric"].get("kind"): last(s) for s in rows(D, 16, "A")}
        exp = {s["metric"].get("kind"): last(s) for s in rows(D, 16, "B")}
        expect(f"force-unlocks by kind: the controller's counter for TerraformMachine, 0 for the others: {ctl}",
               set(ctl) == set(exp) == {"TerraformMachine", "TerraformCluster", "TerraformMachinePool"}
               and ctl["TerraformMachine"] > 0 and ctl["TerraformCluster"] == 0 and ctl["TerraformMachinePool"] == 0)
        # Counted once, not per replica: the panel's exporter column against the same increase
        # summed over both replicas, evaluated by the same Prometheus at the same instant over the
        # same samples (comparing with the controller's counter instead depended on the scrape
        # offsets of two targets: increase() extrapolates a 30 s history differently for each).
        tm_e = exp.get("TerraformMachine", 0)
        both = api("query", time=now, query='sum(increase(captf_state_lock_force_unlocks_total'
                   '{kind="TerraformMachine"}[1h]))')
        both_v = float(both["data"]["result"][0]["value"][1]) if both.get("data", {}).get("result") else 0.0
        expect(f"force-unlocks by kind: the exporter's counter counted once, not per replica: {tm_e} of {both_v}"
               " summed over both replicas",
               both_v > 0 and abs(tm_e - both_v / 2) < 0.25 * both_v)
        expect("controller series: 1", [last(s) for s in rows(D, 17, "A")] == [1])
        expect("objects with a verdict mismatch: 1 (pool), not per replica", [last(s) for s in rows(D, 18, "A")] == [1])

        # Force-unlock bars: one event in one bar. web's counter grows by 1 every 2 s; with
        # Grafana's step ($__interval) 2 s and $__rate_interval 4 s (4 x the 1 s scrape), the
        # bars over a range must add up to the counter's growth over it (the max over replicas,
        # from Prometheus at the first bar's start and the last bar), each bar a whole number.
        # increase(...[$__rate_interval]) counts each event in about two bars, extrapolated.
        step = 2
        try:
            wait_for(lambda: float((api("query", query=f'max(count_over_time(up{{job="{JOB}"}}[1m]))')["data"]["result"]
                                    or [{"value": [0, "0"]}])[0]["value"][1]) >= 24,
                     60, "24 s of scrapes for the bars", interval=0.5)
        except WaitTimeout as e:
            raise RuntimeError(str(e)) from None
        pinned = subprocess.run(
            [sys.executable, str(HERE / "queries.py"), "--prometheus", base, "--interval", f"{step}s",
             "--rate-interval", f"{2 * step}s", "--var", "namespace=team-a", "--var", "kind=TerraformMachine",
             "--var", "name=web", *sys.argv[1:]], capture_output=True, text=True, timeout=60)
        if pinned.returncode != 0:
            raise RuntimeError(f"queries.py with pinned variables failed: {pinned.stderr}")
        truth = 'max(captf_state_lock_force_unlocks_total{namespace="team-a", kind="TerraformMachine", name="web"})'
        end = time.time()
        for q in map(json.loads, pinned.stdout.splitlines()):
            if (q["dashboard"], q["panel_id"]) not in ((M, 6), (D, 10)):
                continue
            where = f'{q["dashboard"]} panel {q["panel_id"]} {q["panel"]!r}'
            r = api("query_range", query=q["expr"], start=end - 8 * step, end=end, step=step)
            res = r.get("data", {}).get("result", [])
            if r.get("status") != "success" or len(res) != 1:
                failures.append(f"bars {where}: want one series, got {r.get('error') or len(res)}\n      {q['expr']}")
                continue
            vals = [(float(t), float(v)) for t, v in res[0]["values"]]
            first, lastt = vals[0][0], vals[-1][0]
            at = lambda t: float(api("query", query=truth, time=t)["data"]["result"][0]["value"][1])
            grew = at(lastt) - at(first - step)
            total = sum(v for _, v in vals)
            expect(f"bars {where}: {len(vals)} bars add up to the counter's growth {grew:g}, got {total:g} "
                   f"({[v for _, v in vals]})", grew > 0 and abs(total - grew) < 1e-9)
            expect(f"bars {where}: every bar counts whole events: {[v for _, v in vals]}",
                   all(v == int(v) for _, v in vals))
    except RuntimeError as e:
        failures.append(str(e))
    finally:
        prom.stop(timeout=20)
        for s in (*replicas, *replicas_b, controller):
            s.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"FAIL live {f}")
    print(f"live: {passed} checks against Prometheus in {time.time() - t0:.1f} s")
    print(f"live: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
