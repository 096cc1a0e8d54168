#!/usr/bin/env python3
"""How long kube-apiserver takes to stream what each tool asks for at start (issue 25).

The exporter's time to ready is bound by the API server's side of its two large streams (the lock
Leases and the TerraformMachines, JSON), kube-state-metrics' by one (the Leases, protobuf). This
script times those requests alone, with a client that does nothing but read the bytes, so that
the two tools' start figures in KSM.md can be told apart from what the server costs.

One run: a real control plane (tests/pykit/controlplane.py), CAPTF's CRDs, the KSM comparison's
fleet (tools/bench/ksm_compare.py: N lock Leases, a tenth held, one TerraformMachine each), the
watch caches warmed; then ``--rounds`` rounds of, each request on a new TLS connection as the
admin:

  - a streaming watch-list (``sendInitialEvents=true``) of the lock Leases, in JSON and in
    protobuf, and of the TerraformMachines in JSON (a CRD has no protobuf), read up to the
    ``k8s.io/initial-events-end`` bookmark;
  - the same two JSON watch-lists at once (what the exporter's start asked until it read Leases
    in protobuf), and the Leases' protobuf one beside the TerraformMachines' JSON one (what it
    asks since);
  - an unpaged LIST of each (served from the watch cache), JSON and protobuf;
  - the Leases' protobuf watch-list beside the TerraformMachines' LIST, and both LISTs at once:
    the floor of any start that reads the same objects.

Prints seconds and bytes per request per round, and the medians, with kube-apiserver's CPU
(utime+stime from /proc) over each request: the server's work, which on a small machine shares
the cores with the client. Every process started here is
stopped by its PID (pykit's control plane), also on failure.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent), str(ROOT / "tests")]

import ksm_compare  # noqa: E402

JSON = "application/json"
PROTO_WATCH = "application/vnd.kubernetes.protobuf;type=watch,application/json"
PROTO = "application/vnd.kubernetes.protobuf,application/json"
WATCH_LIST = ("?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
              "&allowWatchBookmarks=true&timeoutSeconds=600")
END = b"initial-events-end"


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Api:
    def __init__(self, cp: Any):
        self.host, port = cp.url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.ctx = ssl.create_default_context(cafile=str(cp.ca_file))
        self.token = cp.admin_token

    def read(self, path: str, accept: str, until: bytes | None) -> tuple[float, int]:
        """Seconds from sending the request to ``until`` (or the end of the body), and bytes read."""
        c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=120)
        try:
            c.connect()  # the TLS handshake is not what is measured
            t = time.monotonic()
            c.request("GET", path, headers={"Authorization": f"Bearer {self.token}", "Accept": accept})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"GET {path} ({accept}): {r.status} {r.read(300)!r}")
            n, tail = 0, b""
            while chunk := r.read1(1 << 16):
                n += len(chunk)
                if until is not None and until in tail + chunk:
                    break
                tail = chunk[-64:]
            return time.monotonic() - t, n
        finally:
            c.close()


#: "both, both listed" in docs/performance.md and KSM.md: the floor of any start that reads the
#: lock Leases and the TerraformMachines (tools/bench/ready_floor.py measures against it)
FLOOR_PAIR = "Leases protobuf LIST + TerraformMachines JSON LIST at once"
#: what the exporter asks at start since it reads the Leases in protobuf
EXPORTER_PAIR = "Leases protobuf + TerraformMachines JSON watch-lists at once"


def requests_for(cp: Any) -> tuple[dict[str, tuple[str, str, bytes | None]], dict[str, tuple[str, str]]]:
    """The single requests (path, Accept, read until) and the pairs read at once, by name."""
    gv = cp.kube.get("/apis/infrastructure.cluster.x-k8s.io").json()["preferredVersion"]["groupVersion"]
    leases = "/apis/coordination.k8s.io/v1/leases"
    machines = f"/apis/{gv}/terraformmachines"
    sel = "labelSelector=tfstate%3Dtrue"
    cases = {
        "Leases watch-list, JSON": (leases + WATCH_LIST + "&" + sel, JSON, END),
        "Leases watch-list, protobuf": (leases + WATCH_LIST + "&" + sel, PROTO_WATCH, END),
        "TerraformMachines watch-list, JSON": (machines + WATCH_LIST, JSON, END),
        "Leases LIST, JSON": (f"{leases}?{sel}", JSON, None),
        "Leases LIST, protobuf": (f"{leases}?{sel}", PROTO, None),
        "TerraformMachines LIST, JSON": (machines, JSON, None),
    }
    pairs = {
        "both JSON watch-lists at once": ("Leases watch-list, JSON", "TerraformMachines watch-list, JSON"),
        "Leases protobuf + TerraformMachines JSON watch-lists at once":
            ("Leases watch-list, protobuf", "TerraformMachines watch-list, JSON"),
        "Leases protobuf watch-list + TerraformMachines JSON LIST at once":
            ("Leases watch-list, protobuf", "TerraformMachines LIST, JSON"),
        "Leases protobuf LIST + TerraformMachines JSON LIST at once":
            ("Leases LIST, protobuf", "TerraformMachines LIST, JSON"),
    }
    return cases, pairs


def read_pair(api: Api, cases: dict[str, tuple[str, str, bytes | None]], members: tuple[str, str]) -> tuple[float, int]:
    """The two requests ``members`` at once, each on its own thread and TLS connection: seconds from
    starting both to the end of the later one, and bytes read in all."""
    got: list[tuple[float, int]] = []
    ts = [threading.Thread(target=lambda c=c: got.append(api.read(*cases[c]))) for c in members]
    t = time.monotonic()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    if len(got) != 2:
        raise RuntimeError(f"a parallel read failed ({' + '.join(members)})")
    return time.monotonic() - t, sum(n for _, n in got)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leases", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    import tempfile

    from pykit.controlplane import KUBE_VERSION, ControlPlane

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="stream-cost-"))
    cp = ControlPlane(workdir / "controlplane")
    try:
        cp.start()
        cp.kube.apply_crds([ROOT / "tests" / "crds" / "terraform.yaml", ROOT / "tests" / "crds" / "capi-cluster.yaml"])
        nss, objs = ksm_compare.build_fleet(args.leases, args.leases // 10, 100)
        for ns in nss:
            cp.kube.namespace(ns)
        secs = ksm_compare.create_parallel(cp, objs, 8)
        print(f"kube-apiserver {KUBE_VERSION}: {len(objs)} objects created in {secs:.1f} s", flush=True)
        ksm_compare.warm_watch_caches(cp)
        api = Api(cp)
        cases, pairs = requests_for(cp)
        pid = cp.apiserver.pid if cp.apiserver is not None else None
        if pid is None:
            raise RuntimeError("kube-apiserver is not running")

        def settled_cpu(since: float) -> float:
            # The server's work outlasts the last byte a little (its garbage collector): counted
            # after a pause, so each request is charged what it caused.
            time.sleep(0.3)
            return cpu_seconds(pid) - since
        times: dict[str, list[float]] = {k: [] for k in [*cases, *pairs]}
        cpus: dict[str, list[float]] = {k: [] for k in [*cases, *pairs]}
        sizes: dict[str, int] = {}
        for rnd in range(args.rounds):
            for name, (path, accept, until) in cases.items():
                c0 = cpu_seconds(pid)
                s, n = api.read(path, accept, until)
                times[name].append(s)
                cpus[name].append(settled_cpu(c0))
                sizes[name] = n
            for pair, members in pairs.items():
                c0 = cpu_seconds(pid)
                wall, n = read_pair(api, cases, members)
                times[pair].append(wall)
                cpus[pair].append(settled_cpu(c0))
                sizes[pair] = n
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
        print(f"\n| request ({args.leases} lock Leases, {args.leases} TerraformMachines, kube-apiserver "
              f"{KUBE_VERSION}) | median s | range s | server CPU s, median | bytes |")
        print("| --- | --- | --- | --- | --- |")
        for k, v in times.items():
            print(f"| {k} | {statistics.median(v):.3f} | {min(v):.3f}-{max(v):.3f} | "
                  f"{statistics.median(cpus[k]):.2f} | {sizes[k]} |")
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
