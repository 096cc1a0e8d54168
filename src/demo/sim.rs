//! The scenario: what happens in the simulated cluster, and when.
//!
//! One cycle (repeats every 2 minutes, times from its start):
//! - `prod-cp-0`: held by its own running runner pod (own_live);
//! - `prod-md-0`: its runner pod fails at 10 s (own_stale), the next Job
//!   force-unlocks it at 45 s (released, a ForceUnlocked Event counted);
//! - `prod-md-1`: a workstation lock, 20 s old at start, outlives the
//!   inherited 30 s lockTimeoutSeconds at 10 s (foreign, overdue), released
//!   at 90 s;
//! - `prod-pool`: a malformed lock-info (unknown);
//! - `prod-pool-2`: held by its own runner pod, which is gone (own_stale),
//!   and its apply waits for the approval of a pending TerraformPlan, so no
//!   Job will clear the lock;
//! - CAPTF's own verdict (`StateReadable`) on every object: it agrees,
//!   except on `prod-md-2`, whose condition still names a holder the lock
//!   no longer has (a disagreement, within the grace);
//! - TerraformCluster `prod`: held by its runner, released at 20 s;
//! - `prod-md-3`: held by its own runner pod, which is not in the pod list
//!   and whose GET is forbidden (own_unverified);
//! - `retained-0`: a lock whose object was deleted with Retain (still
//!   reported).
//!
//! Before the first cycle the cluster also holds a ForceUnlocked Event from
//! the past: it sets the last-seen time but is not counted.

use std::sync::Arc;
use std::time::Duration;

use super::objects::{
    capi_cluster, force_unlock_event, lease, lease_lock_id, lock_id, lock_info, pod, runner_pod,
    state_locked_message, terraform_object, terraform_plan, with_captf_status, CLUSTER, NS,
};
use super::store::Store;
use crate::core::kind::Kind;
use crate::core::timeouts::JobsPolicy;
use crate::index::Resource;

const M: Kind = Kind::TerraformMachine;
const MP: Kind = Kind::TerraformMachinePool;
const C: Kind = Kind::TerraformCluster;

/// How long one cycle of the scenario lasts.
pub const CYCLE: Duration = Duration::from_secs(120);

/// The runner pods of the scenario.
struct Pods {
    cp: String,
    md: String,
    cluster: String,
    unreadable: String,
}

impl Pods {
    fn new() -> Pods {
        Pods {
            cp: runner_pod(M, "prod-cp-0"),
            md: runner_pod(M, "prod-md-0"),
            cluster: runner_pod(C, CLUSTER),
            unreadable: runner_pod(M, "prod-md-3"),
        }
    }
}

fn held_by_pod(pod: &str, age_seconds: i64) -> String {
    lock_info(&format!("@{pod}"), age_seconds)
}

/// Puts the state every cycle starts from.
fn set_scene(store: &Store, pods: &Pods) {
    store.put(Resource::Clusters, capi_cluster(CLUSTER));
    // The cluster's own Jobs get a deadline; its members inherit a 30 s
    // lock timeout from defaults, which the workstation lock outlives.
    store.put(
        Resource::TerraformClusters,
        terraform_object(
            Resource::TerraformClusters,
            CLUSTER,
            Some(JobsPolicy {
                lock_timeout_seconds: None,
                active_deadline_seconds: Some(1800),
            }),
            Some(JobsPolicy {
                lock_timeout_seconds: Some(30),
                active_deadline_seconds: None,
            }),
        ),
    );
    let read = ("True", "StateRead", "The state was read");
    for name in ["prod-cp-0", "prod-md-0", "prod-md-3"] {
        store.put(
            Resource::TerraformMachines,
            with_captf_status(
                terraform_object(Resource::TerraformMachines, name, None, None),
                read,
                600,
                name == "prod-cp-0",
            ),
        );
    }
    let alice = state_locked_message(
        &lock_id("alice@alice-laptop"),
        "alice@alice-laptop",
        "OperationTypeApply",
    );
    store.put(
        Resource::TerraformMachines,
        with_captf_status(
            terraform_object(Resource::TerraformMachines, "prod-md-1", None, None),
            ("False", "StateLocked", &alice),
            20,
            false,
        ),
    );
    let own_timeout = JobsPolicy {
        lock_timeout_seconds: Some(120),
        active_deadline_seconds: None,
    };
    let bob = state_locked_message(
        &lease_lock_id(M, "prod-md-2"),
        "bob@bob-desktop",
        "OperationTypePlan",
    );
    store.put(
        Resource::TerraformMachines,
        with_captf_status(
            terraform_object(
                Resource::TerraformMachines,
                "prod-md-2",
                Some(own_timeout),
                None,
            ),
            ("False", "StateLocked", &bob),
            300,
            false,
        ),
    );
    store.put(
        Resource::TerraformMachinePools,
        terraform_object(Resource::TerraformMachinePools, "prod-pool", None, None),
    );
    store.put(
        Resource::TerraformMachinePools,
        with_captf_status(
            terraform_object(Resource::TerraformMachinePools, "prod-pool-2", None, None),
            read,
            900,
            false,
        ),
    );
    store.put(
        Resource::TerraformPlans,
        terraform_plan("prod-pool-2-5d1c", MP, "prod-pool-2", "Pending"),
    );
    store.put(
        Resource::Leases,
        lease(
            MP,
            "prod-pool-2",
            Some(&held_by_pod(&runner_pod(MP, "prod-pool-2"), 15)),
        ),
    );
    for p in [&pods.cp, &pods.md, &pods.cluster] {
        store.put(Resource::Pods, pod(p, "Running"));
    }
    store.forbid_get(Resource::Pods, NS, &pods.unreadable);

    store.put(
        Resource::Leases,
        lease(M, "prod-cp-0", Some(&held_by_pod(&pods.cp, 5))),
    );
    store.put(
        Resource::Leases,
        lease(M, "prod-md-0", Some(&held_by_pod(&pods.md, 3))),
    );
    let workstation = lock_info("alice@alice-laptop", 20);
    store.put(Resource::Leases, lease(M, "prod-md-1", Some(&workstation)));
    store.put(Resource::Leases, lease(M, "prod-md-2", None));
    let unreadable = held_by_pod(&pods.unreadable, 2);
    store.put(Resource::Leases, lease(M, "prod-md-3", Some(&unreadable)));
    store.put(
        Resource::Leases,
        lease(MP, "prod-pool", Some("{\"ID\": \"x\", \"Who\": 42}")),
    );
    store.put(
        Resource::Leases,
        lease(C, CLUSTER, Some(&held_by_pod(&pods.cluster, 1))),
    );
    let retained = lock_info("@old-runner-pod", 4000);
    store.put(Resource::Leases, lease(M, "retained-0", Some(&retained)));
}

/// Fills an empty store with what exists before the exporter starts: the
/// first cycle's scene and an Event from the past. Call before the
/// watchers list, so none of it arrives as a change.
pub fn seed(store: &Store) {
    store.put(
        Resource::Events,
        force_unlock_event("prod-cp-0.old", M, "prod-cp-0", 2),
    );
    set_scene(store, &Pods::new());
}

/// Plays the scenario forever on a store [`seed`] has filled.
pub async fn run(store: Arc<Store>) {
    let pods = Pods::new();
    let mut n = 0u64;
    loop {
        n += 1;
        if n > 1 {
            set_scene(&store, &pods);
        }
        cycle(&store, &pods, n).await;
    }
}

async fn at(start: tokio::time::Instant, secs: u64) {
    tokio::time::sleep_until(start + Duration::from_secs(secs)).await;
}

async fn cycle(store: &Store, pods: &Pods, n: u64) {
    let start = tokio::time::Instant::now();
    at(start, 10).await;
    store.put(Resource::Pods, pod(&pods.md, "Failed"));
    at(start, 20).await;
    store.put(Resource::Leases, lease(C, CLUSTER, None));
    store.put(Resource::Pods, pod(&pods.cluster, "Succeeded"));
    at(start, 45).await;
    // The next Job force-unlocks the stale lock and reports it.
    store.put(Resource::Leases, lease(M, "prod-md-0", None));
    let event = format!("prod-md-0.{n}");
    store.put(
        Resource::Events,
        force_unlock_event(&event, M, "prod-md-0", 1),
    );
    store.delete(Resource::Pods, NS, &pods.md);
    at(start, 90).await;
    store.put(Resource::Leases, lease(M, "prod-md-1", None));
    tokio::time::sleep_until(start + CYCLE).await;
}
