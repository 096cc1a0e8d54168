//! The incremental render against a whole one: after every change of a
//! random sequence (every resource, deletes, relists, clock-driven flips),
//! the render that re-encoded only the buckets of the keys the index
//! marked gives the same bytes as one rendered from scratch. A write that
//! forgets to mark what it moved fails here.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::buckets::IndexRender;
use super::{Exposition, Format};
use crate::core::jobname::{job_name, Op};
use crate::core::kind::Kind;
use crate::core::lockinfo::LockInfo;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};
use crate::index::{
    CapiCluster, CaptfStatus, ForceUnlockEvent, Index, IndexResource, LockLease, ObjectKey,
    PlanEntry, PodState, StateReadable, TfObject,
};
use crate::shared::Shared;

const NS: [&str; 2] = ["ns-a", "ns-b"];

/// xorshift64*: a fixed sequence per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Object names: short ones, and one over 63 bytes (a hashed owner label,
/// a hashed Job name).
fn names(kind: Kind) -> Vec<String> {
    let base = match kind {
        Kind::TerraformCluster => "c",
        Kind::TerraformMachine => "m",
        Kind::TerraformMachinePool => "p",
    };
    let mut v: Vec<String> = (0..3).map(|i| format!("{base}{i}")).collect();
    v.push(format!("{base}-{}", "long".repeat(17)));
    v
}

const KINDS: [Kind; 3] = [
    Kind::TerraformCluster,
    Kind::TerraformMachine,
    Kind::TerraformMachinePool,
];

fn pod_of(kind: Kind, name: &str) -> String {
    format!(
        "{}-x7k2p",
        job_name(kind.short(), name, Op::Apply, 1, "abc123")
    )
}

fn lease(rng: &mut Rng, ns: &str, kind: Kind, name: &str) -> (ObjectKey, LockLease) {
    let suffix = state_suffix(ns, kind, name);
    let label_name = if name.len() > 63 {
        Some(format!("hash-{}", &suffix[..8]))
    } else {
        Some(name.to_string())
    };
    let who = match rng.below(4) {
        0 => String::new(),
        1 => format!("@{}", pod_of(kind, name)),
        2 => "bob@laptop".to_string(),
        _ => format!("@{}", pod_of(kind, &format!("{name}x"))),
    };
    let created = rng.below(2) == 0;
    let id = format!("id-{}", rng.below(3));
    let info = (!who.is_empty()).then(|| LockInfo {
        id: id.clone(),
        operation: "OperationTypeApply".into(),
        who: who.clone(),
        version: "1.9.0".into(),
        created: created
            .then(|| chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()),
    });
    let held = if who.is_empty() { String::new() } else { id };
    let l = LockLease::new(
        ns.into(),
        suffix.clone(),
        Some(kind.as_str()),
        label_name,
        held,
        Ok(info),
    );
    (ObjectKey::new(ns, lock_lease_name(&suffix)), l)
}

fn object(rng: &mut Rng, kind: Kind, name: &str) -> TfObject {
    let timeout = *rng.pick(&[None, Some(60), Some(900)]);
    let jobs = timeout.map(|t| JobsPolicy {
        lock_timeout_seconds: Some(t),
        active_deadline_seconds: None,
    });
    let state_readable = match rng.below(4) {
        0 => None,
        1 => Some(StateReadable::from_fields("True", "StateRead", "", None)),
        2 => Some(StateReadable::from_fields(
            "False",
            "StateLocked",
            "the state lock is held by bob@laptop (OperationTypeApply since x)",
            None,
        )),
        _ => Some(StateReadable::from_fields(
            "False",
            "StateCorrupt",
            "",
            None,
        )),
    };
    TfObject {
        kind,
        name: name.into(),
        cluster_label: Some(names(Kind::TerraformCluster)[rng.below(2)].clone()),
        jobs: if kind == Kind::TerraformCluster {
            None
        } else {
            jobs
        },
        cluster: (kind == Kind::TerraformCluster).then_some(ClusterPolicies {
            jobs: None,
            default_jobs: jobs,
        }),
        captf: CaptfStatus {
            state_readable,
            active_job: rng.below(4) == 0,
        },
    }
}

/// One random change, through the same typed inputs the watchers use.
fn change(rng: &mut Rng, ix: &mut Index, now: SystemTime, later: SystemTime) {
    let ns = *rng.pick(&NS);
    let kind = *rng.pick(&KINDS);
    let name = rng.pick(&names(kind)).clone();
    let delete = rng.below(4) == 0;
    match rng.below(11) {
        0 | 1 => {
            let key = (kind, ObjectKey::new(ns, &name));
            if delete {
                IndexResource::<TfObject>::delete(ix, key, now);
            } else {
                let obj = object(rng, kind, &name);
                ix.apply(key, obj, now);
            }
        }
        2..=4 => {
            let (key, l) = lease(rng, ns, kind, &name);
            if delete {
                IndexResource::<LockLease>::delete(ix, key, now);
            } else {
                ix.apply(key, l, now);
            }
        }
        5 => {
            // A Lease whose object is unknown and whose labels prove
            // nothing: shown by kind only while no object claims the name.
            let suffix = state_suffix(ns, kind, &name);
            if rng.below(2) == 0 {
                // The object that claims that name (its name is the
                // suffix), or its deletion.
                let key = (kind, ObjectKey::new(ns, &suffix));
                if delete {
                    IndexResource::<TfObject>::delete(ix, key, now);
                } else {
                    let obj = object(rng, kind, &suffix);
                    ix.apply(key, obj, now);
                }
                return;
            }
            let key = ObjectKey::new(ns, lock_lease_name(&suffix));
            let l = LockLease::new(
                ns.into(),
                suffix,
                Some(kind.as_str()),
                None,
                "id-raw".into(),
                Ok(None),
            );
            ix.apply(key, l, now);
        }
        6 => {
            let key = ObjectKey::new(ns, pod_of(kind, &name));
            if delete {
                IndexResource::<PodState>::delete(ix, key, now);
            } else {
                let finished = rng.below(2) == 0;
                ix.apply(key, PodState { finished }, now);
            }
        }
        7 => {
            let key = ObjectKey::new(ns, format!("ev-{}", rng.below(4)));
            if delete {
                IndexResource::<ForceUnlockEvent>::delete(ix, key, now);
            } else {
                let ev = ForceUnlockEvent {
                    namespace: ns.into(),
                    kind: kind.as_str().into(),
                    name,
                    occurrences: 1 + rng.below(3) as u64,
                    last_seen: Some(1_700_000_000.0 + rng.below(100) as f64),
                };
                ix.apply(key, ev, now);
            }
        }
        8 => {
            let key = ObjectKey::new(ns, format!("plan-{}", rng.below(3)));
            if delete {
                IndexResource::<PlanEntry>::delete(ix, key, now);
            } else {
                let target_kind = *rng.pick(&[Kind::TerraformCluster, Kind::TerraformMachinePool]);
                let plan = PlanEntry {
                    target_kind,
                    target_name: rng.pick(&names(target_kind)).clone(),
                    pending: rng.below(2) == 0,
                };
                ix.apply(key, plan, now);
            }
        }
        9 => {
            let key = ObjectKey::new(ns, format!("capi-{}", rng.below(2)));
            if delete {
                IndexResource::<CapiCluster>::delete(ix, key, now);
            } else {
                let infra_ref = InfraRef {
                    api_group: "infrastructure.cluster.x-k8s.io".into(),
                    kind: "TerraformCluster".into(),
                    name: rng.pick(&names(Kind::TerraformCluster)).clone(),
                };
                ix.apply(key, CapiCluster { infra_ref }, now);
            }
        }
        _ => {
            // The clock: overdue locks and outlasted disagreements flip.
            ix.newly_overdue(later);
            ix.newly_mismatched(later);
        }
    }
}

/// The plain text of a render, from its gzip parts when it is compact.
fn text(render: &mut IndexRender) -> Vec<u8> {
    if let Some(chunks) = render.chunks() {
        return chunks.iter().flat_map(|c| c.to_vec()).collect();
    }
    render.compress().expect("compresses");
    let parts = render.gz_parts().expect("compressed");
    let deflate: Vec<bytes::Bytes> = parts.iter().map(|p| p.deflate.clone()).collect();
    super::gzip_parts::Inflate::new(Arc::new(deflate))
        .flat_map(|c| c.to_vec())
        .collect()
}

/// The first differing lines of two expositions, for a failure message.
pub(super) fn first_difference(a: &[u8], b: &[u8]) -> String {
    let a = String::from_utf8_lossy(a);
    let b = String::from_utf8_lossy(b);
    let d: Vec<_> = a
        .lines()
        .zip(b.lines())
        .filter(|(x, y)| x != y)
        .take(2)
        .collect();
    format!(
        "{d:?} (lines: {} vs {})",
        a.lines().count(),
        b.lines().count()
    )
}

#[test]
fn an_incremental_render_equals_a_whole_one_after_every_change() {
    // Plain text kept, and (a limit of one byte) only gzip parts kept.
    for (seed, plain_limit) in (1..=6u64).zip([usize::MAX, 1].into_iter().cycle()) {
        let (shared, _rx) = Shared::new();
        let shared: Arc<Shared> = shared;
        shared.write(|ix, _| ix.set_verdict_grace(Duration::from_secs(1)));
        let sink = shared.changes();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let start = SystemTime::now();
        let mut incremental = IndexRender::new(Format::OpenMetrics, Exposition::default())
            .expect("a render")
            .with_plain_limit(plain_limit);
        let mut saw_compact = false;
        for step in 0..400 {
            // Fixed render time per step, ahead of every write's clock.
            let at = start + Duration::from_secs(3600 + step);
            shared.write(|ix, now| change(&mut rng, ix, now, at));
            let changes = sink.lock().map(|mut c| c.take()).expect("unpoisoned");
            incremental.note(&changes);
            incremental.update(&shared, at).expect("renders");
            let mut whole =
                IndexRender::new(Format::OpenMetrics, Exposition::default()).expect("a render");
            whole.update(&shared, at).expect("renders");
            let (a, b) = (text(&mut incremental), text(&mut whole));
            saw_compact |= incremental.is_compact();
            assert!(
                a == b,
                "seed {seed}, step {step}: {}",
                first_difference(&a, &b)
            );
        }
        assert_eq!(saw_compact, plain_limit == 1, "seed {seed}");
    }
}
