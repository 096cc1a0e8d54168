//! `demo`: the exporter's pipeline fed by a simulated cluster in-process.
//!
//! The simulation emits the same trimmed watch events the real watchers
//! produce (list, then changes) into the same [`Ingest`], and answers live
//! pod reads from its own state, so everything from the index to `/metrics`
//! is the production code. Only the API client is replaced.
//!
//! One cycle (repeats every 2 minutes, times from its start):
//! - `prod-cp-0`: held by its own running runner pod (own_live);
//! - `prod-md-0`: its runner pod fails at 10 s (own_stale), the next Job
//!   force-unlocks it at 45 s (released, a ForceUnlocked Event counted);
//! - `prod-md-1`: a workstation lock, 20 s old at start, outlives the
//!   inherited 30 s lockTimeoutSeconds at 10 s (foreign, overdue), released at 90 s;
//! - `prod-pool`: a malformed lock-info (unknown);
//! - TerraformCluster `prod`: held by its runner, released at 20 s;
//! - `prod-md-3`: held by its own runner pod, which the exporter may not
//!   read (own_unverified);
//! - `retained-0`: a lock whose object was deleted with Retain (still reported).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use kube::runtime::watcher::Event;

use crate::core::jobname::{job_name, Op};
use crate::core::kind::Kind;
use crate::core::lockinfo::parse_lock_info;
use crate::core::suffix::{lock_lease_name, state_suffix};
use crate::core::timeouts::{ClusterPolicies, InfraRef, JobsPolicy};
use crate::index::{
    CapiCluster, Change, Entry, ForceUnlockEvent, LockLease, PodRead, PodState, Resource, TfObject,
};
use crate::runtime::{Ingest, Shared};

const NS: &str = "demo";
const CLUSTER: &str = "prod";

/// The simulated cluster's pods, for live reads.
#[derive(Debug, Default)]
pub struct Sim {
    pods: Mutex<HashMap<(String, String), &'static str>>,
}

impl Sim {
    /// A new, empty simulation.
    pub fn new() -> Arc<Sim> {
        Arc::new(Sim::default())
    }

    /// A live read of a simulated pod.
    pub fn read_pod(&self, namespace: &str, name: &str) -> PodRead {
        let pods = match self.pods.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        match pods.get(&(namespace.to_string(), name.to_string())) {
            None => PodRead::Gone,
            Some(&"Succeeded") | Some(&"Failed") => PodRead::Finished,
            // A pod the exporter may not read (RBAC): the read fails.
            Some(&"Forbidden") => PodRead::Failed,
            Some(_) => PodRead::Live,
        }
    }

    fn set_pod(&self, name: &str, phase: Option<&'static str>) {
        if let Ok(mut pods) = self.pods.lock() {
            let key = (NS.to_string(), name.to_string());
            match phase {
                Some(p) => pods.insert(key, p),
                None => pods.remove(&key),
            };
        }
    }
}

fn runner_pod(kind: Kind, name: &str) -> String {
    format!(
        "{}-x7k2p",
        job_name(kind.short(), name, Op::Apply, 1, "a1b2c3")
    )
}

/// A UUID-shaped lock ID derived from the holder, as the backends write UUIDs.
fn demo_lock_id(who: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = hex::encode(Sha256::digest(who.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn lock_info(who: &str, age_seconds: i64) -> String {
    let created = Utc::now() - chrono::Duration::seconds(age_seconds);
    serde_json::json!({
        "ID": demo_lock_id(who),
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": who,
        "Version": "1.9.0",
        "Created": created.to_rfc3339_opts(SecondsFormat::Nanos, true),
        "Path": "",
    })
    .to_string()
}

fn lease(kind: Kind, name: &str, held: Option<&str>) -> Change {
    let suffix = state_suffix(NS, kind, name);
    let lease_name = lock_lease_name(&suffix);
    let (holder, info) = match held {
        Some(raw) => (format!("lock-{}", suffix), parse_lock_info(raw).map(Some)),
        None => (String::new(), Ok(None)),
    };
    let entry = LockLease::new(
        NS.into(),
        suffix,
        Some(kind.as_str()),
        Some(name.into()),
        holder,
        info,
    );
    Change {
        key: (NS.into(), lease_name),
        entry: Some(Entry::Lease(entry)),
    }
}

fn object(
    kind: Kind,
    name: &str,
    jobs: Option<JobsPolicy>,
    cluster: Option<ClusterPolicies>,
) -> Change {
    let obj = TfObject {
        kind,
        name: name.into(),
        cluster_label: Some(CLUSTER.into()),
        jobs,
        cluster,
    };
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Object(obj)),
    }
}

fn pod(name: &str, phase: &'static str, sim: &Sim) -> Change {
    sim.set_pod(name, Some(phase));
    let finished = crate::core::classify::is_terminal_phase(phase);
    Change {
        key: (NS.into(), name.into()),
        entry: Some(Entry::Pod(PodState { finished })),
    }
}

fn pod_gone(name: &str, sim: &Sim) -> Change {
    sim.set_pod(name, None);
    Change {
        key: (NS.into(), name.into()),
        entry: None,
    }
}

fn force_unlocked(event_name: &str, kind: Kind, name: &str, occurrences: u64) -> Change {
    let now = crate::index::unix_now();
    let ev = ForceUnlockEvent {
        namespace: NS.into(),
        kind: kind.as_str().into(),
        name: name.into(),
        occurrences,
        last_seen: Some(now),
    };
    Change {
        key: (NS.into(), event_name.into()),
        entry: Some(Entry::ForceUnlock(ev)),
    }
}

struct Feeds {
    by_resource: HashMap<Resource, Ingest>,
}

impl Feeds {
    fn send(&mut self, shared: &Shared, resource: Resource, ev: Event<Change>) {
        let ingest = self
            .by_resource
            .entry(resource)
            .or_insert_with(|| Ingest::new(shared, resource, None));
        ingest.event(shared, ev);
    }

    fn list(&mut self, shared: &Shared, resource: Resource, items: Vec<Change>) {
        self.send(shared, resource, Event::Init);
        for c in items {
            self.send(shared, resource, Event::InitApply(c));
        }
        self.send(shared, resource, Event::InitDone);
    }
}

/// Runs the simulation forever, one cycle after another.
pub async fn run(shared: Arc<Shared>, sim: Arc<Sim>) {
    for r in Resource::ALL {
        shared.health.register(r, "");
    }
    let mut feeds = Feeds {
        by_resource: HashMap::new(),
    };
    // An Event from before the start: sets the last-seen time, not counted.
    feeds.list(
        &shared,
        Resource::Events,
        vec![force_unlocked(
            "prod-cp-0.old",
            Kind::TerraformMachine,
            "prod-cp-0",
            2,
        )],
    );
    let mut n = 0u64;
    loop {
        n += 1;
        cycle(&shared, &sim, &mut feeds, n).await;
    }
}

async fn at(start: tokio::time::Instant, secs: u64) {
    tokio::time::sleep_until(start + Duration::from_secs(secs)).await;
}

async fn cycle(shared: &Shared, sim: &Sim, feeds: &mut Feeds, n: u64) {
    let start = tokio::time::Instant::now();
    let (m, mp, c) = (
        Kind::TerraformMachine,
        Kind::TerraformMachinePool,
        Kind::TerraformCluster,
    );
    let cp_pod = runner_pod(m, "prod-cp-0");
    let md_pod = runner_pod(m, "prod-md-0");
    let tc_pod = runner_pod(c, CLUSTER);
    // Not in the pod cache and not readable: own_unverified.
    let unreadable_pod = runner_pod(m, "prod-md-3");
    sim.set_pod(&unreadable_pod, Some("Forbidden"));
    let policies = ClusterPolicies {
        jobs: Some(JobsPolicy {
            lock_timeout_seconds: None,
            active_deadline_seconds: Some(1800),
        }),
        default_jobs: Some(JobsPolicy {
            lock_timeout_seconds: Some(30),
            active_deadline_seconds: None,
        }),
    };

    feeds.list(
        shared,
        Resource::Clusters,
        vec![Change {
            key: (NS.into(), CLUSTER.into()),
            entry: Some(Entry::Capi(CapiCluster {
                infra_ref: InfraRef {
                    api_group: crate::core::kind::API_GROUP.into(),
                    kind: c.as_str().into(),
                    name: CLUSTER.into(),
                },
            })),
        }],
    );
    feeds.list(
        shared,
        Resource::TerraformClusters,
        vec![object(c, CLUSTER, policies.jobs, Some(policies))],
    );
    feeds.list(
        shared,
        Resource::TerraformMachines,
        vec![
            object(m, "prod-cp-0", None, None),
            object(m, "prod-md-0", None, None),
            object(m, "prod-md-1", None, None),
            object(m, "prod-md-3", None, None),
            object(
                m,
                "prod-md-2",
                Some(JobsPolicy {
                    lock_timeout_seconds: Some(120),
                    active_deadline_seconds: None,
                }),
                None,
            ),
        ],
    );
    feeds.list(
        shared,
        Resource::TerraformMachinePools,
        vec![object(mp, "prod-pool", None, None)],
    );
    feeds.list(
        shared,
        Resource::Pods,
        vec![
            pod(&cp_pod, "Running", sim),
            pod(&md_pod, "Running", sim),
            pod(&tc_pod, "Running", sim),
        ],
    );
    let retained = {
        let mut l = lease(m, "retained-0", Some(&lock_info("@old-runner-pod", 4000)));
        if let Some(Entry::Lease(x)) = &mut l.entry {
            x.label_name = Some("retained-0".into());
        }
        l
    };
    feeds.list(
        shared,
        Resource::Leases,
        vec![
            lease(m, "prod-cp-0", Some(&lock_info(&format!("@{cp_pod}"), 5))),
            lease(m, "prod-md-0", Some(&lock_info(&format!("@{md_pod}"), 3))),
            lease(m, "prod-md-1", Some(&lock_info("alice@alice-laptop", 20))),
            lease(m, "prod-md-2", None),
            lease(
                m,
                "prod-md-3",
                Some(&lock_info(&format!("@{unreadable_pod}"), 2)),
            ),
            lease(mp, "prod-pool", Some("{\"ID\": \"x\", \"Who\": 42}")),
            lease(c, CLUSTER, Some(&lock_info(&format!("@{tc_pod}"), 1))),
            retained,
        ],
    );

    at(start, 10).await;
    feeds.send(
        shared,
        Resource::Pods,
        Event::Apply(pod(&md_pod, "Failed", sim)),
    );
    at(start, 20).await;
    feeds.send(
        shared,
        Resource::Leases,
        Event::Apply(lease(c, CLUSTER, None)),
    );
    feeds.send(
        shared,
        Resource::Pods,
        Event::Apply(pod(&tc_pod, "Succeeded", sim)),
    );
    at(start, 45).await;
    feeds.send(
        shared,
        Resource::Leases,
        Event::Apply(lease(m, "prod-md-0", None)),
    );
    let event_name = format!("prod-md-0.{n}");
    feeds.send(
        shared,
        Resource::Events,
        Event::Apply(force_unlocked(&event_name, m, "prod-md-0", 1)),
    );
    feeds.send(
        shared,
        Resource::Pods,
        Event::Delete(pod_gone(&md_pod, sim)),
    );
    at(start, 90).await;
    feeds.send(
        shared,
        Resource::Leases,
        Event::Apply(lease(m, "prod-md-1", None)),
    );
    at(start, 120).await;
}
