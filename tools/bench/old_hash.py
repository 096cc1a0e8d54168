"""The exporter's old, fixed bucket hash, copied from src/metrics/store.rs at main (``key_hash``,
``bucket_of``, ``bits_for``), to craft Lease names that all land in one bucket (issue 48's
crafted-names phase, churn_phases.py) and to tell from a body whether a binary still places keys
with it (``old_hash_order``). Only the standard library."""

from __future__ import annotations

import hashlib
import random
import re
import time

SHORT = {"TerraformCluster": "c", "TerraformMachine": "m", "TerraformMachinePool": "mp"}
MASK = (1 << 64) - 1


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
