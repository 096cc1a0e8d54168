"""The churn phases (issue 48): what a change costs when it is not a lock's own.

Run by bench.py after the exporter is ready and its stale verdicts are settled
(``--churn-phases all``, or a comma list of ``PHASES``; ``--churn-only`` skips the
other phases). Every phase has the same two windows, so each can be read against
the ``lease`` phase, the baseline:

1. a CPU window (once the exporter's CPU time stands still): the phase's changes at
   its rate for ``--phase-seconds``, no scrape at all; then the bench waits until the exporter's CPU time stops moving (the last
   change's render done). Exporter CPU per change = CPU time over the window /
   changes; "net" subtracts the ``idle`` phase's CPU rate over the same time;
2. a probe window: the same changes go on at the same rate while a probe Lease is
   released and taken again ``--probes`` times, each after a pause drawn from
   [0, 200 ms); each probe's change-to-metric is bench.py's ``change_latency`` (POST,
   then back-to-back plain scrapes until the body shows it). The probe looks only
   at ``captf_state_lock_held`` being 1 or not (0 or absent), so it means the same
   on a binary that drops idle objects' series as on one that keeps them.

Phases:

- ``idle``: no change (the CPU floor of the windows);
- ``lease``: workstation-held Leases released and taken again, round robin, at
  ``--churn-rate`` (default 10/s: the rate of the issue's measurement);
- ``tc-status``: ``status.activeJob`` set and cleared (the ``StateReadable``
  condition written again on each clear) across the fleet's TerraformClusters,
  round robin, at ``--churn-rate``: the same rate as ``lease``, to compare per change;
- ``tc-captf``: the same at CAPTF's own rate, ``WRITES_PER_JOB`` status writes per
  Job and one drift Job per object every ``CAPTF_DRIFT_INTERVAL_S``: 2 x clusters /
  1800 s (0.11/s at 10k objects, 1.1/s at 100k, 11/s at 1M); its CPU window lasts at
  least 3 changes (at most three times ``--phase-seconds``);
- ``tc-burst``: every TerraformCluster's Job starts, then every one ends, as fast as
  8 concurrent writers get them to the fake API (a CAPTF restart, or a fleet-wide
  drift); the CPU window is one such burst (start and end); probes are posted right
  after each half of the later bursts starts (``--burst-rounds`` bursts, 2 probes each);
- ``tc-label``: the ``cluster.x-k8s.io/cluster-name`` label of one TerraformCluster
  (``wl-00000``, with ``spec.jobs`` and ``spec.defaults.jobs``: its machines inherit
  from it) flipped every 100 ms, what a tenant can do at will;
- ``random-names`` and ``crafted-names``: ``--crowd`` Leases each (held, no object),
  created before the two phases, churned like ``lease``, the probe one of them.
  The crafted names all land in one bucket under the old fixed hash (``old_key_hash``,
  copied from src/metrics/store.rs at main); the random ones spread. The bench checks
  the copy against the binary: a body whose ``captf_state_lock_held`` lines follow
  the old hash's bucket order ("body in old-hash order") is a binary with that hash.

Only the standard library; the HTTP session and the measuring helpers come from
bench.py (``Ctx``).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import statistics
import time
import urllib.parse
import zlib
from dataclasses import dataclass, field
from typing import Awaitable, Callable

PHASES = ("idle", "lease", "tc-status", "tc-captf", "tc-burst", "tc-label", "random-names", "crafted-names")
LOCK_LEASE_PREFIX = "lock-tfstate-default-"
#: CAPTF's --drift-default-interval (cmd/manager/app/options/options.go): a drift Job per
#: object every 30 minutes unless the object sets its own interval.
CAPTF_DRIFT_INTERVAL_S = 30 * 60
#: status writes per Job: status.activeJob set when it starts; cleared, with the
#: StateReadable condition written again, when it ends.
WRITES_PER_JOB = 2
SHORT = {"TerraformCluster": "c", "TerraformMachine": "m", "TerraformMachinePool": "mp"}
MASK = (1 << 64) - 1
#: the session does not decompress: ask for the plain text
IDENTITY = {"Accept-Encoding": "identity"}


# ------------------------------------------------------------------------------------------------
# The old fixed bucket hash (src/metrics/store.rs at main: key_hash, bucket_of, bits_for)
# ------------------------------------------------------------------------------------------------

def old_key_hash(namespace: str, suffix: str) -> int:
    """FNV-1a 64 of the namespace and the state suffix, each followed by a 0 byte, then
    MurmurHash3's 64-bit finaliser."""
    h = 0xcbf29ce484222325
    for part in (namespace, suffix):
        for b in part.encode() + b"\0":
            h ^= b
            h = (h * 0x100000001b3) & MASK
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & MASK
    h ^= h >> 33
    h = (h * 0xc4ceb9fe1a85ec53) & MASK
    return h ^ (h >> 33)


def old_bits_for(keys: int, per: int = 1024, min_bits: int = 4) -> int:
    """The store's bucket count (as a power of two) for ``keys`` keys."""
    buckets = max(1, -(-keys // max(per, 1)))
    return max((buckets - 1).bit_length(), min_bits)


def old_bucket(h: int, bits: int) -> int:
    return h >> (64 - bits)


def state_suffix(namespace: str, kind: str, name: str) -> str:
    digest = hashlib.sha256(f"{namespace}/{kind}/{name}".encode()).hexdigest()
    return f"{digest[:16]}-{SHORT[kind]}"


def crafted_suffixes(namespace: str, n: int, bits: int, seed: int = 48) -> tuple[list[str], int, float]:
    """``n`` suffixes shaped like CAPTF's (16 hex digits, ``-m``) whose keys in ``namespace``
    all land in bucket 0 of ``1 << bits`` under the old hash; also the candidates tried
    and the seconds it took (what a tenant pays to find them)."""
    rng = random.Random(seed)
    out: list[str] = []
    tries = 0
    t = time.perf_counter()
    while len(out) < n:
        s = f"{rng.getrandbits(64):016x}-m"
        tries += 1
        if old_bucket(old_key_hash(namespace, s), bits) == 0:
            out.append(s)
    return out, tries, time.perf_counter() - t


def random_suffixes(n: int, seed: int = 4848) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(64):016x}-m" for _ in range(n)]


HELD_LINE = re.compile(rb'^captf_state_lock_held\{([^}]*)\}', re.M)
LABEL = re.compile(rb'(\w+)="((?:[^"\\]|\\.)*)"')


def old_hash_order(body: bytes, bits: int, added: set[str]) -> tuple[int, int]:
    """(pairs in order, pairs) of consecutive ``captf_state_lock_held`` lines whose keys'
    old-hash buckets do not decrease: every pair in order means the binary places keys
    with the old hash (families list their keys bucket by bucket)."""
    buckets = []
    for m in HELD_LINE.finditer(body):
        labels = {k.decode(): v.decode() for k, v in LABEL.findall(m.group(1))}
        ns, kind, name = labels.get("namespace", ""), labels.get("kind", ""), labels.get("name", "")
        if name in added or kind not in SHORT:
            suffix = name
        else:
            suffix = state_suffix(ns, kind, name)
        buckets.append(old_bucket(old_key_hash(ns, suffix), bits))
    pairs = max(0, len(buckets) - 1)
    return sum(a <= b for a, b in zip(buckets, buckets[1:])), pairs


# ------------------------------------------------------------------------------------------------
# Driving changes and probing
# ------------------------------------------------------------------------------------------------

@dataclass
class Ctx:
    """What a phase needs from bench.py's run."""
    session: object
    api: str
    metrics_url: str
    pid: int
    info: dict
    args: object
    change_latency: Callable[..., Awaitable[float]]
    metric_line: Callable[[bytes, str, str, str], bytes | None]
    cpu_seconds: Callable[[int], float]
    log: Callable[..., None]
    deadline_s: float = 60
    lock_n: list[int] = field(default_factory=lambda: [0])


async def post(ctx: Ctx, path: str, **q) -> None:
    url = f"{ctx.api}{path}?{urllib.parse.urlencode(q)}"
    async with ctx.session.post(url) as r:
        if r.status != 200:
            raise RuntimeError(f"POST {url}: {r.status} {await r.text()}")
        await r.read()


class LeaseSet:
    """Leases released and taken again in turn; ``held`` is their state as this side set it."""

    def __init__(self, ctx: Ctx, leases: list[str], held: bool = True):
        self.ctx, self.leases, self.held = ctx, leases, {lease: held for lease in leases}
        self.k = 0

    async def toggle(self) -> None:
        lease = self.leases[self.k % len(self.leases)]
        self.k += 1
        await toggle_lease(self.ctx, lease, self.held)


async def toggle_lease(ctx: Ctx, lease: str, held: dict) -> None:
    if held[lease]:
        await post(ctx, "/_change/release", lease=lease)
    else:
        ctx.lock_n[0] += 1
        await post(ctx, "/_change/lock", lease=lease, id=f"churn48-{ctx.lock_n[0]}", who="churn@laptop-7")
    held[lease] = not held[lease]


async def paced(change: Callable[[], Awaitable[None]], rate: float, stop: asyncio.Event) -> int:
    """Calls ``change`` at ``rate`` a second until ``stop`` is set (late calls are not made
    up in a burst: the schedule restarts from the late one); returns how many were made."""
    made = 0
    due = time.perf_counter()
    while not stop.is_set():
        delay = due - time.perf_counter()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except asyncio.TimeoutError:
                pass
        await change()
        made += 1
        due = max(due + 1 / rate, time.perf_counter() - 0.5 / rate)
    return made


async def cpu_quiet(ctx: Ctx, timeout: float = 30) -> float:
    """Waits until the exporter's CPU time has not moved for 0.3 s (the renders of the
    changes made are done); returns its CPU time then."""
    deadline = time.perf_counter() + timeout
    last, still = ctx.cpu_seconds(ctx.pid), 0
    while time.perf_counter() < deadline:
        await asyncio.sleep(0.1)
        now = ctx.cpu_seconds(ctx.pid)
        still = still + 1 if now == last else 0
        last = now
        if still >= 3:
            break
    return last


class Probe:
    """One lock Lease released and taken again, its change-to-metric measured each time."""

    def __init__(self, ctx: Ctx, lease: str, namespace: str, name: str, held: bool = True):
        self.ctx, self.lease, self.ns, self.name, self.held = ctx, lease, namespace, name, held

    def shows_held(self, body: bytes) -> bool:
        line = self.ctx.metric_line(body, "captf_state_lock_held", self.ns, self.name)
        return line is not None and line.rsplit(b" ", 1)[-1] in (b"1", b"1.0")

    async def once(self) -> float:
        ctx = self.ctx
        q = urllib.parse.quote(self.lease, safe="")
        if self.held:
            path, key = "/_change/release", f"lease={q}"
            before, done = self.shows_held, (lambda b: not self.shows_held(b))
        else:
            ctx.lock_n[0] += 1
            path, key = "/_change/lock", f"lease={q}&id=probe48-{ctx.lock_n[0]}&who=probe%40laptop-9"
            before, done = (lambda b: not self.shows_held(b)), self.shows_held
        t = await ctx.change_latency(ctx.session, ctx.api, ctx.metrics_url, path, key, before, done,
                                     deadline_s=ctx.deadline_s)
        self.held = not self.held
        return t


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


async def measure(ctx: Ctx, name: str, change, rate: float, seconds: float, probe: Probe | None,
                  probes: int) -> dict:
    """The two windows of a phase (module doc)."""
    res: dict = {"phase": name, "rate_per_s": rate}
    await cpu_quiet(ctx)  # the renders of the phase before are not this one's
    stop = asyncio.Event()
    c0, t0 = ctx.cpu_seconds(ctx.pid), time.perf_counter()
    task = asyncio.create_task(paced(change, rate, stop) if change else stop.wait())
    await asyncio.sleep(seconds)
    stop.set()
    made = await task
    if not change:
        made = 0  # the task was the stop event's wait
    t_changes = time.perf_counter()
    c1 = await cpu_quiet(ctx)
    t1 = time.perf_counter()
    res.update(changes=made, changes_s=t_changes - t0, window_s=t1 - t0, cpu_s=c1 - c0,
               cpu_pct=(c1 - c0) / (t1 - t0) * 100,
               cpu_ms_per_change=(c1 - c0) / made * 1e3 if made else None)
    if probe is None or probes <= 0:
        return res
    stop = asyncio.Event()
    task = asyncio.create_task(paced(change, rate, stop)) if change else None
    pauses = random.Random(zlib.crc32(name.encode()))
    lat = []
    try:
        for _ in range(probes):
            await asyncio.sleep(pauses.uniform(0, 0.2))
            lat.append(await probe.once())
    finally:
        stop.set()
        res["changes_during_probes"] = await task if task else 0
    res.update(probe_ms=[x * 1e3 for x in lat], probe_p50_ms=pct(lat, 50) * 1e3, probe_p99_ms=pct(lat, 99) * 1e3)
    return res


async def burst_phase(ctx: Ctx, tcs: list[str], probe: Probe, rounds: int) -> dict:
    """Every TerraformCluster's Job starts, then every one ends (8 writers at once): each half
    toggles every cluster once."""
    async def half(op: str) -> None:
        queue = list(tcs)

        async def writer():
            while queue:
                await post(ctx, "/_change/tc-job", tc=queue.pop(), op=op)
        await asyncio.gather(*(writer() for _ in range(8)))

    res: dict = {"phase": "tc-burst"}
    await cpu_quiet(ctx)
    c0, t0 = ctx.cpu_seconds(ctx.pid), time.perf_counter()
    # Each half toggles every cluster once (the earlier phases leave some with a Job).
    await half("toggle")
    await half("toggle")
    t_changes = time.perf_counter()
    c1 = await cpu_quiet(ctx)
    t1 = time.perf_counter()
    made = 2 * len(tcs)
    res.update(changes=made, changes_s=t_changes - t0, rate_per_s=made / (t_changes - t0), window_s=t1 - t0,
               cpu_s=c1 - c0, cpu_pct=(c1 - c0) / (t1 - t0) * 100, cpu_ms_per_change=(c1 - c0) / made * 1e3)
    lat = []
    for _ in range(rounds):
        for _half in range(2):
            burst = asyncio.create_task(half("toggle"))
            await asyncio.sleep(0)  # the writers are under way before the probe's change
            lat.append(await probe.once())
            await burst
            await cpu_quiet(ctx)
    if lat:
        res.update(probe_ms=[x * 1e3 for x in lat], probe_p50_ms=pct(lat, 50) * 1e3,
                   probe_p99_ms=pct(lat, 99) * 1e3)
    return res


# ------------------------------------------------------------------------------------------------
# The phases
# ------------------------------------------------------------------------------------------------

def add_arguments(ap) -> None:
    g = ap.add_argument_group("churn phases (issue 48; tools/bench/churn_phases.py)")
    g.add_argument("--churn-phases", default="none", metavar="LIST",
                   help=f"'all', 'none' (default) or a comma list of {', '.join(PHASES)}")
    g.add_argument("--churn-only", action="store_true",
                   help="after ready and settled, run only the churn phases (no scrape, idle or "
                        "change-to-metric phases, no Prometheus)")
    g.add_argument("--phase-seconds", type=float, default=20, help="each phase's CPU window (default 20)")
    g.add_argument("--churn-rate", type=float, default=10,
                   help="changes a second in the lease, tc-status and name phases (default 10)")
    g.add_argument("--probes", type=int, default=20, help="probe changes per phase (default 20)")
    g.add_argument("--crowd", type=int, default=1000,
                   help="Leases of each name phase, crafted and random (default 1000)")
    g.add_argument("--burst-rounds", type=int, default=3, help="probed bursts in tc-burst (default 3)")


def selected(args) -> list[str]:
    spec = args.churn_phases.strip()
    if spec in ("", "none"):
        return []
    if spec == "all":
        return list(PHASES)
    names = [p.strip() for p in spec.split(",") if p.strip()]
    unknown = [p for p in names if p not in PHASES]
    if unknown:
        raise SystemExit(f"--churn-phases: unknown {', '.join(unknown)} (known: {', '.join(PHASES)})")
    return [p for p in PHASES if p in names]


def terraform_clusters(info: dict) -> list[str]:
    """The fleet's TerraformClusters as ``ns/name`` (examples/fake_api/fleet.rs: cluster c is
    ``wl-<c:05>`` in ``team-<c mod namespaces:03>``)."""
    return [f"team-{c % info['namespaces']:03}/wl-{c:05}" for c in range(info["clusters"])]


async def run(ctx: Ctx, phases: list[str]) -> dict:
    args, info = ctx.args, ctx.info
    out: dict = {"phases": [], "crowd": None}
    workstation = [h for h in info["held"] if h["holder"] == "workstation"]
    # bench.py's change-to-metric and churn battery take the first six workstation locks.
    spare = workstation[8:]
    if len(spare) < 3:
        raise RuntimeError("churn phases: too few workstation-held locks in the fleet")
    probe_h, pool = spare[0], [h["lease"] for h in spare[1:21]]
    probe = Probe(ctx, probe_h["lease"], probe_h["namespace"], probe_h["name"])
    tcs = terraform_clusters(info)
    secs, rate, n_probes = args.phase_seconds, args.churn_rate, args.probes

    async def tc_toggle_round_robin():
        k = [0]

        async def change():
            await post(ctx, "/_change/tc-job", tc=tcs[k[0] % len(tcs)], op="toggle")
            k[0] += 1
        return change

    crowd = None
    for name in phases:
        ctx.log(f"churn phase {name}")
        if name == "idle":
            r = await measure(ctx, name, None, 0, secs, None, 0)
        elif name == "lease":
            r = await measure(ctx, name, LeaseSet(ctx, pool).toggle, rate, secs, probe, n_probes)
        elif name == "tc-status":
            r = await measure(ctx, name, await tc_toggle_round_robin(), rate, secs, probe, n_probes)
        elif name == "tc-captf":
            captf = WRITES_PER_JOB * len(tcs) / CAPTF_DRIFT_INTERVAL_S
            # At least 3 changes, unless that would be past 3 windows (small fleets).
            r = await measure(ctx, name, await tc_toggle_round_robin(), captf, max(secs, min(3 / captf, 3 * secs)),
                              probe, n_probes)
        elif name == "tc-burst":
            r = await burst_phase(ctx, tcs, probe, args.burst_rounds)
        elif name == "tc-label":
            async def flip():
                await post(ctx, "/_change/tc-label", tc=tcs[0])
            r = await measure(ctx, name, flip, 10, secs, probe, n_probes)
        else:
            if crowd is None:
                crowd = await make_crowds(ctx)
                out["crowd"] = {k: v for k, v in crowd.items() if k not in ("random", "crafted")}
            names = crowd["random" if name == "random-names" else "crafted"]
            ns = crowd["namespace"]
            leases = [f"{ns}/{LOCK_LEASE_PREFIX}{s}" for s in names]
            crowd_probe = Probe(ctx, leases[0], ns, names[0])
            r = await measure(ctx, name, LeaseSet(ctx, leases[1:]).toggle, rate, secs, crowd_probe, n_probes)
        r["phase"] = name
        out["phases"].append(r)
        ctx.log(f"churn phase {name}: {r.get('changes')} changes, "
                f"{fmt(r.get('cpu_ms_per_change'))} ms CPU each, probe p50 {fmt(r.get('probe_p50_ms'))} "
                f"p99 {fmt(r.get('probe_p99_ms'))} ms")
    return out


async def make_crowds(ctx: Ctx) -> dict:
    """Creates ``--crowd`` held Leases under random names and as many under names crafted for
    one bucket of the old hash, in the first namespace; waits until the exporter shows the
    last one and is quiet."""
    args, info = ctx.args, ctx.info
    ns = "team-000"
    n = args.crowd
    bits = old_bits_for(info["items"]["leases"] + 2 * n)
    crafted, tries, find_s = crafted_suffixes(ns, n, bits)
    rand = random_suffixes(n)
    t = time.perf_counter()
    for s in rand + crafted:
        ctx.lock_n[0] += 1
        await post(ctx, "/_change/lease-add", lease=f"{ns}/{LOCK_LEASE_PREFIX}{s}",
                   id=f"crowd48-{ctx.lock_n[0]}", who="tenant@laptop-3")
    last = Probe(ctx, "", ns, crafted[-1])

    async def shown():
        async with ctx.session.get(ctx.metrics_url, headers=IDENTITY) as r:
            return last.shows_held(await r.read())
    deadline = time.perf_counter() + 120
    while not await shown():
        if time.perf_counter() > deadline:
            raise TimeoutError("the crowd Leases did not show on /metrics within 120 s")
        await asyncio.sleep(0.2)
    await cpu_quiet(ctx)
    async with ctx.session.get(ctx.metrics_url, headers=IDENTITY) as r:
        body = await r.read()
    in_order, pairs = old_hash_order(body, bits, set(rand) | set(crafted))
    return {"namespace": ns, "n": n, "bits": bits, "crafted_tries": tries, "crafted_find_s": find_s,
            "create_s": time.perf_counter() - t, "old_hash_order": [in_order, pairs],
            "random": rand, "crafted": crafted}


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def fmt(x, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def report(results: list[dict]) -> str:
    """One Markdown table: a row per run and phase, the ratios against the same run's lease phase."""
    rows = []
    for r in results:
        c = r.get("churn48")
        if not c:
            continue
        by = {p["phase"]: p for p in c["phases"]}
        idle = by.get("idle")
        base = by.get("lease")
        idle_rate = idle["cpu_s"] / idle["window_s"] if idle else 0.0
        run = f"{r['objects']:,}" + (f" {r['binary']}" if r.get("binary") not in (None, "exporter") else "")
        for p in c["phases"]:
            made = p.get("changes") or 0
            net = (p["cpu_s"] - idle_rate * p["window_s"]) / made * 1e3 if made else None
            cpu_x = p99_x = None
            if base and p is not base and made and base.get("changes"):
                base_net = (base["cpu_s"] - idle_rate * base["window_s"]) / base["changes"] * 1e3
                cpu_x = net / base_net if base_net > 0 else None
                if p.get("probe_p99_ms") and base.get("probe_p99_ms"):
                    p99_x = p["probe_p99_ms"] / base["probe_p99_ms"]
            rows.append(
                f"| {run} | {p['phase']} | {fmt(p.get('rate_per_s'), 2)} | {made} | "
                f"{fmt(p.get('cpu_ms_per_change'))} / {fmt(net)} | {fmt(p.get('cpu_pct'))} % | "
                f"{fmt(p.get('probe_p50_ms'), 0)} / {fmt(p.get('probe_p99_ms'), 0)} "
                f"({len(p.get('probe_ms', []))}) | {fmt(cpu_x, 2)}x / {fmt(p99_x, 2)}x |")
        crowd = c.get("crowd")
        if crowd:
            a, b = crowd["old_hash_order"]
            rows.append(f"| {run} | (crowds) | {crowd['n']} Leases each in {crowd['namespace']}; crafted for bucket 0 "
                        f"of {1 << crowd['bits']}: {crowd['crafted_tries']:,} names tried in "
                        f"{crowd['crafted_find_s']:.1f} s; body in old-hash order: {a}/{b} line pairs | | | | | |")
    if not rows:
        return ""
    head = ("### Churn phases (issue 48)\n\n"
            "CPU per change: the exporter's CPU time over the phase's CPU window / its changes, "
            "then net of the idle phase's rate. Probe: change-to-metric of a lock Lease released or "
            "taken while the phase's changes go on (p50 / p99, nearest rank; the count in brackets). "
            "x lease: net CPU per change and probe p99 against the same run's lease phase "
            "(issue 48's goal: at most 1.5x).\n\n"
            "| run | phase | changes/s | changes | CPU ms per change (gross / net) | CPU % of a core | "
            "probe p50 / p99 ms (n) | x lease (CPU / p99) |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
    return head + "\n".join(rows)
