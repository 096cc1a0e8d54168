//! Holder classes of a held state lock (docs/contract.md section 3), decided as
//! CAPTF's stale-lock check (`internal/locks/stale.go`) decides, with its
//! "not ours" split into foreign and unknown.

use super::jobname::owns_pod;
use super::kind::Kind;
use super::lockinfo::{holder_host, LockInfo};

/// The class of a held lock's holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HolderClass {
    /// An own runner pod that is still alive: CAPTF waits.
    OwnLive,
    /// An own runner pod that is gone or finished: the next Job force-unlocks.
    OwnStale,
    /// A parseable holder that is not an own runner pod: CAPTF never unlocks.
    Foreign,
    /// Lock-info missing or unparseable, or Who has no host: as foreign.
    Unknown,
    /// An own runner pod whose state could not be read: never guessed.
    OwnUnverified,
}

impl HolderClass {
    /// Every class, for series that must exist at 0.
    pub const ALL: [HolderClass; 5] = [
        HolderClass::OwnLive,
        HolderClass::OwnStale,
        HolderClass::Foreign,
        HolderClass::Unknown,
        HolderClass::OwnUnverified,
    ];

    /// The `class` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            HolderClass::OwnLive => "own_live",
            HolderClass::OwnStale => "own_stale",
            HolderClass::Foreign => "foreign",
            HolderClass::Unknown => "unknown",
            HolderClass::OwnUnverified => "own_unverified",
        }
    }
}

impl std::fmt::Display for HolderClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who holds a lock, before looking at any pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No usable lock-info, or Who has no host after its last `@`.
    Unknown,
    /// A host that is not one of the object's own runner pods.
    Foreign,
    /// One of the object's own runner pods (the pod name).
    OwnPod(String),
}

/// Decides the holder from the parsed lock-info (`None` when absent or
/// rejected by [`crate::lockinfo::parse_lock_info`]) and the lock's
/// object (`None` when the object is unknown: an own pod cannot then be
/// proven, so a present host counts as foreign).
pub fn holder_of(info: Option<&LockInfo>, owner: Option<(Kind, &str)>) -> Holder {
    let Some(host) = info.and_then(|i| holder_host(&i.who)) else {
        return Holder::Unknown;
    };
    match owner {
        Some((kind, name)) if owns_pod(kind.short(), name, host) => Holder::OwnPod(host.to_owned()),
        _ => Holder::Foreign,
    }
}

/// What is known about the holder pod of an own lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodEvidence {
    /// Seen existing with a phase other than Succeeded/Failed
    /// (a terminating pod counts as live: it may still run the runtime).
    Live,
    /// Confirmed not found (by a live read, not just a cache miss).
    Gone,
    /// Confirmed Succeeded or Failed: its containers hold nothing.
    Finished,
    /// The read failed, or a cache miss is not yet confirmed.
    Unreadable,
}

/// The class of a held lock from its holder and, for own pods, the pod
/// evidence (ignored otherwise).
///
/// ```
/// use captf_core::classify::{classify, holder_of, HolderClass, PodEvidence};
/// use captf_core::kind::Kind;
/// use captf_core::lockinfo::parse_lock_info;
///
/// let web = Some((Kind::TerraformMachine, "web"));
/// let runner = parse_lock_info(r#"{"ID":"1","Who":"root@captf-m-web-apply-a0-abc123-x7k2p"}"#).ok();
/// let laptop = parse_lock_info(r#"{"ID":"2","Who":"alice@laptop"}"#).ok();
///
/// let own = holder_of(runner.as_ref(), web);
/// assert_eq!(classify(&own, PodEvidence::Live), HolderClass::OwnLive);
/// assert_eq!(classify(&own, PodEvidence::Gone), HolderClass::OwnStale);
/// let foreign = holder_of(laptop.as_ref(), web);
/// assert_eq!(classify(&foreign, PodEvidence::Gone), HolderClass::Foreign);
/// ```
pub fn classify(holder: &Holder, pod: PodEvidence) -> HolderClass {
    match holder {
        Holder::Unknown => HolderClass::Unknown,
        Holder::Foreign => HolderClass::Foreign,
        Holder::OwnPod(_) => match pod {
            PodEvidence::Live => HolderClass::OwnLive,
            PodEvidence::Gone | PodEvidence::Finished => HolderClass::OwnStale,
            PodEvidence::Unreadable => HolderClass::OwnUnverified,
        },
    }
}

/// Whether a pod phase is terminal (CAPTF: `PodSucceeded` or `PodFailed`).
pub fn is_terminal_phase(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

/// The lock ID CAPTF would force-unlock: lock-info `ID` when non-empty
/// (only from a lock-info that parsed), else the Lease's holderIdentity.
pub fn lock_id<'a>(holder_identity: &'a str, info: Option<&'a LockInfo>) -> &'a str {
    info.map(|i| i.id.as_str())
        .filter(|id| !id.is_empty())
        .unwrap_or(holder_identity)
}

/// Whether a lock is overdue: foreign or unknown (CAPTF never clears
/// those) and older than the effective lockTimeoutSeconds, so that
/// object's Jobs now fail waiting for it.
pub fn is_overdue(class: HolderClass, age_seconds: f64, lock_timeout_seconds: i64) -> bool {
    // i64 -> f64 loses precision only beyond 2^53 s, far past any timeout.
    #[allow(clippy::cast_precision_loss)]
    let timeout = lock_timeout_seconds as f64;
    matches!(class, HolderClass::Foreign | HolderClass::Unknown) && age_seconds > timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(who: &str) -> LockInfo {
        LockInfo {
            who: who.to_owned(),
            ..LockInfo::default()
        }
    }

    const POD: &str = "captf-m-web-apply-a1-abc123-x7k2p";

    #[test]
    fn class_names() {
        let names = [
            "own_live",
            "own_stale",
            "foreign",
            "unknown",
            "own_unverified",
        ];
        assert_eq!(HolderClass::ALL.len(), names.len());
        for (c, n) in HolderClass::ALL.into_iter().zip(names) {
            assert_eq!(c.as_str(), n);
            assert_eq!(c.to_string(), n);
        }
    }

    #[test]
    fn holder_unknown_without_info_or_host() {
        let owner = Some((Kind::TerraformMachine, "web"));
        assert_eq!(holder_of(None, owner), Holder::Unknown);
        assert_eq!(holder_of(Some(&info("")), owner), Holder::Unknown);
        assert_eq!(holder_of(Some(&info("nouser")), owner), Holder::Unknown);
        assert_eq!(holder_of(Some(&info("user@")), owner), Holder::Unknown);
        assert_eq!(holder_of(Some(&info(POD)), owner), Holder::Unknown);
        assert_eq!(holder_of(None, None), Holder::Unknown);
    }

    #[test]
    fn holder_own_pod() {
        let owner = Some((Kind::TerraformMachine, "web"));
        let who = format!("@{POD}");
        assert_eq!(
            holder_of(Some(&info(&who)), owner),
            Holder::OwnPod(POD.into())
        );
        let who = format!("root@x@{POD}");
        assert_eq!(
            holder_of(Some(&info(&who)), owner),
            Holder::OwnPod(POD.into())
        );
    }

    #[test]
    fn holder_foreign() {
        let owner = Some((Kind::TerraformMachine, "web"));
        assert_eq!(
            holder_of(Some(&info("alice@laptop")), owner),
            Holder::Foreign
        );
        // Another object's pod.
        let other = "@captf-m-web-1-apply-a1-abc123-x7k2p";
        assert_eq!(holder_of(Some(&info(other)), owner), Holder::Foreign);
        // Right name, wrong kind.
        let pool = Some((Kind::TerraformMachinePool, "web"));
        assert_eq!(
            holder_of(Some(&info(&format!("@{POD}"))), pool),
            Holder::Foreign
        );
        // Own pod in front of the last '@' does not count.
        assert_eq!(
            holder_of(Some(&info(&format!("{POD}@laptop"))), owner),
            Holder::Foreign
        );
        // Unknown object: cannot prove ownership.
        assert_eq!(
            holder_of(Some(&info(&format!("@{POD}"))), None),
            Holder::Foreign
        );
    }

    #[test]
    fn classification_table() {
        let own = Holder::OwnPod(POD.into());
        assert_eq!(classify(&own, PodEvidence::Live), HolderClass::OwnLive);
        assert_eq!(classify(&own, PodEvidence::Gone), HolderClass::OwnStale);
        assert_eq!(classify(&own, PodEvidence::Finished), HolderClass::OwnStale);
        assert_eq!(
            classify(&own, PodEvidence::Unreadable),
            HolderClass::OwnUnverified
        );
        for ev in [
            PodEvidence::Live,
            PodEvidence::Gone,
            PodEvidence::Finished,
            PodEvidence::Unreadable,
        ] {
            assert_eq!(classify(&Holder::Foreign, ev), HolderClass::Foreign);
            assert_eq!(classify(&Holder::Unknown, ev), HolderClass::Unknown);
        }
    }

    #[test]
    fn terminal_phases() {
        assert!(is_terminal_phase("Succeeded"));
        assert!(is_terminal_phase("Failed"));
        for p in ["Running", "Pending", "Unknown", "", "failed", "succeeded"] {
            assert!(!is_terminal_phase(p), "{p}");
        }
    }

    #[test]
    fn lock_ids() {
        let with_id = LockInfo {
            id: "abc".into(),
            ..LockInfo::default()
        };
        assert_eq!(lock_id("holder", Some(&with_id)), "abc");
        assert_eq!(lock_id("holder", Some(&LockInfo::default())), "holder");
        assert_eq!(lock_id("holder", None), "holder");
    }

    #[test]
    fn overdue() {
        for c in [HolderClass::Foreign, HolderClass::Unknown] {
            assert!(is_overdue(c, 301.0, 300));
            assert!(is_overdue(c, 300.5, 300));
            assert!(!is_overdue(c, 300.0, 300));
            assert!(!is_overdue(c, 10.0, 300));
            assert!(is_overdue(c, 0.1, 0));
            assert!(!is_overdue(c, 0.0, 0));
            assert!(!is_overdue(c, f64::NAN, 0));
        }
        for c in [
            HolderClass::OwnLive,
            HolderClass::OwnStale,
            HolderClass::OwnUnverified,
        ] {
            assert!(!is_overdue(c, 1e9, 300), "{c}");
        }
    }
}
