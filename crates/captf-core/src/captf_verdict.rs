//! CAPTF's own verdict on a lock, and whether it agrees with ours.
//!
//! CAPTF writes what its lock check found into the `StateReadable`
//! condition of every Terraform* object it reconciles (contract 2.11):
//! `True/StateRead` when the state was read and no foreign holder was
//! found, `False/StateLocked` with a message naming the holder when the
//! lock is held by something other than the object's runner. Comparing
//! that with the exporter's class catches a rule that changed in a CAPTF
//! upgrade (the exporter mirrors CAPTF's rules from its source) and an
//! object CAPTF no longer reconciles.
//!
//! Pure: plain values in, a verdict out. The grace during which a
//! disagreement is tolerated (CAPTF looks only between Jobs and only at a
//! reconcile) is the index's business.

use crate::classify::HolderClass;
use crate::shown::{cap, MAX_LABEL_BYTES};

/// The condition type CAPTF reports its state and lock checks in.
pub const STATE_READABLE: &str = "StateReadable";

/// What CAPTF's lock check writes after `is held by ` when it could not
/// name the holder (the Lease or lock-info is gone, or `Who` is empty).
pub const FALLBACK_HOLDER: &str = "something other than this object's runner";

/// `status` of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
    /// Anything else (the API server's validation forbids it, a mock may not).
    Other,
}

impl ConditionStatus {
    /// From the condition's `status` field.
    pub fn parse(s: &str) -> ConditionStatus {
        match s {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            "Unknown" => ConditionStatus::Unknown,
            _ => ConditionStatus::Other,
        }
    }

    /// The `status` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
            ConditionStatus::Other => "other",
        }
    }
}

/// `reason` of CAPTF's `StateReadable` condition: CAPTF's closed set, so
/// that whoever can write an object's status cannot add label values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptfReason {
    /// True: the state was read.
    StateRead,
    /// False: the state is encrypted.
    StateEncrypted,
    /// False: the state does not parse.
    StateCorrupt,
    /// False: the state disagrees with itself.
    StateInconsistent,
    /// False: a provisioned object's state is gone.
    StateLost,
    /// False: the lock is held by something other than the object's runner.
    StateLocked,
    /// False: an apply's outcome is unknown.
    ApplyOutcomeUnknown,
    /// False: a retained state was found.
    RetainedStateFound,
    /// Unknown: no state yet.
    StateNotFound,
    /// Anything else.
    Other,
}

impl CaptfReason {
    /// Every reason, in label order.
    pub const ALL: [CaptfReason; 10] = [
        CaptfReason::StateRead,
        CaptfReason::StateEncrypted,
        CaptfReason::StateCorrupt,
        CaptfReason::StateInconsistent,
        CaptfReason::StateLost,
        CaptfReason::StateLocked,
        CaptfReason::ApplyOutcomeUnknown,
        CaptfReason::RetainedStateFound,
        CaptfReason::StateNotFound,
        CaptfReason::Other,
    ];

    /// From the condition's `reason` field.
    pub fn parse(s: &str) -> CaptfReason {
        CaptfReason::ALL
            .into_iter()
            .find(|r| *r != CaptfReason::Other && r.as_str() == s)
            .unwrap_or(CaptfReason::Other)
    }

    /// The `reason` label value (`other` for any reason outside the set).
    pub fn as_str(self) -> &'static str {
        match self {
            CaptfReason::StateRead => "StateRead",
            CaptfReason::StateEncrypted => "StateEncrypted",
            CaptfReason::StateCorrupt => "StateCorrupt",
            CaptfReason::StateInconsistent => "StateInconsistent",
            CaptfReason::StateLost => "StateLost",
            CaptfReason::StateLocked => "StateLocked",
            CaptfReason::ApplyOutcomeUnknown => "ApplyOutcomeUnknown",
            CaptfReason::RetainedStateFound => "RetainedStateFound",
            CaptfReason::StateNotFound => "StateNotFound",
            CaptfReason::Other => "other",
        }
    }
}

/// CAPTF's `StateReadable` condition, as kept.
#[derive(Clone, Debug, PartialEq)]
pub struct StateReadable {
    /// `status`.
    pub status: ConditionStatus,
    /// `reason`, within the closed set.
    pub reason: CaptfReason,
    /// `reason` as written, capped (shown by `explain` when outside the set).
    pub raw_reason: String,
    /// `message`, capped.
    pub message: String,
    /// Whether `message` was cut to its cap.
    pub message_cut: bool,
    /// `lastTransitionTime` as Unix seconds, when it parsed.
    pub since: Option<f64>,
}

/// What the exporter sees of the lock, for the comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OurVerdict<'a> {
    /// No lock Lease, or one without a holder.
    Released,
    /// Held.
    Held {
        /// The exporter's class.
        class: HolderClass,
        /// lock-info `Who`, when lock-info was accepted; None otherwise.
        who: Option<&'a str>,
        /// `Who` was too long to keep whole, so it cannot be compared.
        who_cut: bool,
    },
}

/// How CAPTF's verdict relates to the exporter's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// CAPTF's condition says nothing about the lock: no condition, another
    /// False reason (which takes precedence over StateLocked in CAPTF), an
    /// Unknown one, or a holder it could not name.
    Silent,
    /// Both say the same.
    Agrees,
    /// They differ.
    Differs(Difference),
}

/// What differs between CAPTF's verdict and the exporter's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// CAPTF reports StateLocked; the exporter sees the lock released.
    LockedButReleased,
    /// CAPTF reports StateLocked; the exporter sees an own runner holding it.
    LockedButOwn(HolderClass),
    /// CAPTF reports StateRead; the exporter sees a foreign or unknown holder.
    ReadButForeign(HolderClass),
    /// Both say locked by a foreign holder, but not the same one. `named`
    /// is the holder CAPTF's message names, as far as it can be told.
    OtherHolder {
        /// The text after `is held by ` up to CAPTF's first separator.
        named: String,
    },
}

impl Difference {
    /// The direction, for logs and pages, in words.
    pub fn text(&self) -> String {
        match self {
            Difference::LockedButReleased => {
                "CAPTF reports the lock held (StateLocked), the exporter sees it released".into()
            }
            Difference::LockedButOwn(c) => format!(
                "CAPTF reports a foreign holder (StateLocked), the exporter sees an own runner ({c})"
            ),
            Difference::ReadButForeign(c) => format!(
                "CAPTF reports the state readable (StateRead), the exporter sees a {c} holder"
            ),
            Difference::OtherHolder { named } => format!(
                "CAPTF's StateLocked message names holder {named:?}, lock-info Who is another"
            ),
        }
    }

    /// A short machine-readable name of the direction.
    pub fn as_str(&self) -> &'static str {
        match self {
            Difference::LockedButReleased => "captf_locked_exporter_released",
            Difference::LockedButOwn(_) => "captf_locked_exporter_own",
            Difference::ReadButForeign(_) => "captf_read_exporter_foreign",
            Difference::OtherHolder { .. } => "other_holder",
        }
    }
}

/// The separators CAPTF writes after `Who` in a StateLocked message.
const AFTER_WHO: [&str; 3] = [" (", " since ", "; every Job"];

/// The text of a StateLocked message after `is held by `; None when the
/// message has no such part.
fn held_by(message: &str) -> Option<&str> {
    message.split_once(" is held by ").map(|(_, rest)| rest)
}

/// Whether a StateLocked message is CAPTF's "could not name the holder".
pub fn is_fallback(message: &str) -> bool {
    held_by(message).is_some_and(|rest| rest.starts_with(FALLBACK_HOLDER))
}

/// Whether a StateLocked message names `who` as the holder: a text after
/// `is held by ` is `who` followed by one of CAPTF's separators. Exact,
/// whatever `who` contains, unlike cutting at the first separator.
pub fn names_holder(message: &str, who: &str) -> bool {
    // Searched, not cut: the lock ID before ` is held by ` is the
    // writer's too and may contain those words.
    message
        .match_indices(" is held by ")
        .filter_map(|(at, m)| message.get(at + m.len()..))
        .filter_map(|rest| rest.strip_prefix(who))
        .any(|after| AFTER_WHO.iter().any(|sep| after.starts_with(sep)))
}

/// The holder a StateLocked message names, cut at CAPTF's first separator:
/// for display only (it is wrong when `Who` itself contains a separator,
/// which [`names_holder`] is not).
pub fn named_holder(message: &str) -> Option<&str> {
    let rest = held_by(message)?;
    let end = AFTER_WHO
        .iter()
        .filter_map(|sep| rest.find(sep))
        .min()
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Compares CAPTF's condition with the exporter's verdict. Whether a Job
/// is active (CAPTF does not look then) is the caller's to check.
pub fn compare(condition: Option<&StateReadable>, ours: OurVerdict<'_>) -> Agreement {
    let Some(c) = condition else {
        return Agreement::Silent;
    };
    let locked = c.status == ConditionStatus::False && c.reason == CaptfReason::StateLocked;
    let read = c.status == ConditionStatus::True && c.reason == CaptfReason::StateRead;
    match ours {
        OurVerdict::Released if locked => Agreement::Differs(Difference::LockedButReleased),
        OurVerdict::Held {
            class,
            who,
            who_cut,
        } => match class {
            HolderClass::OwnLive | HolderClass::OwnStale | HolderClass::OwnUnverified => {
                if locked {
                    Agreement::Differs(Difference::LockedButOwn(class))
                } else if read {
                    Agreement::Agrees
                } else {
                    Agreement::Silent
                }
            }
            HolderClass::Foreign | HolderClass::Unknown => {
                if read {
                    return Agreement::Differs(Difference::ReadButForeign(class));
                }
                if !locked {
                    return Agreement::Silent;
                }
                holder_agreement(&c.message, c.message_cut, who, who_cut)
            }
        },
        OurVerdict::Released if read => Agreement::Agrees,
        OurVerdict::Released => Agreement::Silent,
    }
}

/// Both say a foreign holder: do they name the same one?
fn holder_agreement(
    message: &str,
    message_cut: bool,
    who: Option<&str>,
    who_cut: bool,
) -> Agreement {
    if is_fallback(message) {
        // CAPTF could not name the holder (it re-reads the Lease for it,
        // and that read may fail): nothing to compare.
        return Agreement::Agrees;
    }
    let Some(named) = named_holder(message) else {
        // Not CAPTF's wording at all: its message format changed.
        return Agreement::Silent;
    };
    match who {
        // CAPTF named a holder from lock-info the exporter could not use:
        // the two parsers disagree about it.
        None => Agreement::Differs(Difference::OtherHolder {
            named: named.to_string(),
        }),
        Some(_) if who_cut => Agreement::Agrees,
        Some(who) if names_holder(message, who) => Agreement::Agrees,
        // A message cut within or right after Who cannot be judged.
        Some(who)
            if message_cut
                && held_by(message).is_some_and(|r| who.starts_with(r) || r.starts_with(who)) =>
        {
            Agreement::Agrees
        }
        Some(_) => Agreement::Differs(Difference::OtherHolder {
            named: named.to_string(),
        }),
    }
}

/// Longest condition message kept. CAPTF's StateLocked message is about
/// 200 bytes plus lock ID, Who and Operation; the status is the status
/// writer's, so it is capped like every other untrusted string.
pub const MAX_CONDITION_MESSAGE_BYTES: usize = 2048;

impl StateReadable {
    /// The condition from its fields as written; strings capped here, once.
    pub fn from_fields(status: &str, reason: &str, message: &str, since: Option<f64>) -> Self {
        let kept = cap(message, MAX_CONDITION_MESSAGE_BYTES);
        StateReadable {
            status: ConditionStatus::parse(status),
            reason: CaptfReason::parse(reason),
            raw_reason: cap(reason, MAX_LABEL_BYTES).to_string(),
            message_cut: kept.len() < message.len(),
            message: kept.to_string(),
            since,
        }
    }
}

#[cfg(test)]
mod tests;
