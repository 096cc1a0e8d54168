//! The generated CAPTF fleet: object `i` is a function of `i` and a few sizes.

use captf_lock_exporter::core::jobname::{job_name, Op};
use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::demo::objects::lock_id;
use chrono::{SecondsFormat, Utc};

/// Who holds a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A CAPTF runner pod that exists and is Running.
    OwnAlive,
    /// A CAPTF runner pod that no longer exists.
    OwnGone,
    /// A workstation (`user@laptop-N`).
    Workstation,
}

/// A held lock: one of the fleet's, or one taken through `/_change/lock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Lock {
    Fleet(Holder),
    Custom {
        id: String,
        who: String,
        created: i64,
    },
}

impl Holder {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Holder::OwnAlive => "own_pod_alive",
            Holder::OwnGone => "own_pod_gone",
            Holder::Workstation => "workstation",
        }
    }
}

/// The generated fleet: object `i` is a function of `i` and these sizes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fleet {
    pub(crate) objects: usize,
    pub(crate) clusters: usize,
    pub(crate) namespaces: usize,
    pub(crate) held_every: usize,
    pub(crate) started: i64,
    /// Objects start with CAPTF's status (`--captf-status`).
    pub(crate) captf_status: bool,
}

/// One Terraform object of the fleet.
pub(crate) struct Obj {
    pub(crate) kind: Kind,
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) cluster: String,
    pub(crate) held: Option<Holder>,
}

impl Fleet {
    pub(crate) fn new(objects: usize, held_fraction: f64, captf_status: bool) -> Fleet {
        let clusters = (objects / 100).max(1);
        let held_every = if held_fraction <= 0.0 {
            usize::MAX
        } else {
            ((1.0 / held_fraction).round() as usize).max(1)
        };
        Fleet {
            objects,
            clusters,
            namespaces: clusters.min(100),
            held_every,
            started: Utc::now().timestamp(),
            captf_status,
        }
    }

    pub(crate) fn cluster_name(c: usize) -> String {
        format!("wl-{c:05}")
    }

    pub(crate) fn namespace_of_cluster(&self, c: usize) -> String {
        format!("team-{:03}", c % self.namespaces)
    }

    /// Object `i`: the first `clusters` are TerraformClusters, the rest
    /// TerraformMachines spread over the clusters.
    pub(crate) fn obj(&self, i: usize) -> Obj {
        let c = if i < self.clusters {
            i
        } else {
            i % self.clusters
        };
        let cluster = Fleet::cluster_name(c);
        let (kind, name) = if i < self.clusters {
            (Kind::TerraformCluster, cluster.clone())
        } else {
            (Kind::TerraformMachine, format!("{cluster}-md-{i:06}"))
        };
        let held = (self.held_every != usize::MAX && i % self.held_every == self.held_every / 2)
            .then(|| match (i / self.held_every) % 3 {
                0 => Holder::OwnAlive,
                1 => Holder::OwnGone,
                _ => Holder::Workstation,
            });
        Obj {
            kind,
            name,
            namespace: self.namespace_of_cluster(c),
            cluster,
            held,
        }
    }

    /// Whether object `i` also has a finished (Succeeded) plan pod.
    pub(crate) fn has_history_pod(&self, i: usize) -> bool {
        i % 20 == 7
    }

    pub(crate) fn events(&self) -> usize {
        self.objects / 1000 + 3
    }
}

pub(crate) fn ts(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A UUID-shaped ID derived from `seed` (the demo's rule for lock IDs).
pub(crate) fn uid(seed: &str) -> String {
    lock_id(seed)
}

pub(crate) fn runner_pod(o: &Obj, attempt: i32) -> String {
    format!(
        "{}-x7k2p",
        job_name(o.kind.short(), &o.name, Op::Apply, attempt, "abc123")
    )
}

pub(crate) fn history_pod(o: &Obj) -> String {
    format!(
        "{}-q9w8e",
        job_name(o.kind.short(), &o.name, Op::Plan, 1, "def456")
    )
}

pub(crate) fn who(o: &Obj, i: usize, holder: Holder) -> String {
    match holder {
        Holder::OwnAlive | Holder::OwnGone => format!("@{}", runner_pod(o, 1)),
        Holder::Workstation => format!("user{}@laptop-{}", i % 50, i % 200),
    }
}

pub(crate) const OWNER_KIND: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
pub(crate) const OWNER_NAME: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
