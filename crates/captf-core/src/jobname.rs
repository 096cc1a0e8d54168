//! CAPTF's runner Job names and own-pod recognition
//! (`internal/jobs/name.go`: `Name`, `OwnsPod`).

use super::suffix::sha256_hex16;

/// Longest Job name CAPTF creates, in bytes: the pod name (`<job>-<5>`)
/// then still fits the 63-byte hostname, so Who's host is the full pod name.
pub const MAX_JOB_NAME_LEN: usize = 57;

/// Length of the random suffix the Job controller appends to pod names.
const POD_SUFFIX_LEN: usize = 5;

/// An operation a runner Job performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `apply`.
    Apply,
    /// `destroy`.
    Destroy,
    /// `refresh`.
    Refresh,
    /// `drift`.
    Drift,
    /// `restore`: pushes a state backup into the backend.
    Restore,
    /// `plan`: plans for review and applies nothing.
    Plan,
}

impl Op {
    /// Every operation CAPTF knows.
    pub const ALL: [Op; 6] = [
        Op::Apply,
        Op::Destroy,
        Op::Refresh,
        Op::Drift,
        Op::Restore,
        Op::Plan,
    ];

    /// The operation as it appears in Job names and the `op` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Apply => "apply",
            Op::Destroy => "destroy",
            Op::Refresh => "refresh",
            Op::Drift => "drift",
            Op::Restore => "restore",
            Op::Plan => "plan",
        }
    }

    /// Parses an exact operation name (case-sensitive, as Go's switch is).
    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// CAPTF's `jobs.Name`: `captf-<kindshort>-<name>-<op>-a<attempt>-<hash6>`,
/// with `<name>` replaced by `hex(sha256(name))[:16]` when the whole name
/// would exceed [`MAX_JOB_NAME_LEN`] bytes.
///
/// ```
/// use captf_core::jobname::{job_name, owns_pod, Op};
///
/// let job = job_name("m", "web", Op::Apply, 0, "abc123");
/// assert_eq!(job, "captf-m-web-apply-a0-abc123");
/// // Its pods add a 5-character suffix; a look-alike of another object is not own.
/// assert!(owns_pod("m", "web", "captf-m-web-apply-a0-abc123-x7k2p"));
/// assert!(!owns_pod("m", "web", "captf-m-web2-apply-a0-abc123-x7k2p"));
/// // A name that would pass the 57-byte cap is replaced by its hash.
/// let long = job_name("m", &"x".repeat(60), Op::Apply, 0, "abc123");
/// assert!(long.len() <= 57 && !long.contains("xxxx"));
/// ```
pub fn job_name(kindshort: &str, name: &str, op: Op, attempt: i32, hash6: &str) -> String {
    let n = format!("captf-{kindshort}-{name}-{op}-a{attempt}-{hash6}");
    if n.len() <= MAX_JOB_NAME_LEN {
        return n;
    }
    let hashed = sha256_hex16(name.as_bytes());
    format!("captf-{kindshort}-{hashed}-{op}-a{attempt}-{hash6}")
}

/// CAPTF's `jobs.OwnsPod`: whether `pod` is named like a pod of a Job that
/// [`job_name`] returns for `kindshort` and `name`. Not a pattern match: it
/// peels the segments off from the right exactly as Go does, then rebuilds
/// the Job name and requires equality, so look-alikes never pass.
pub fn owns_pod(kindshort: &str, name: &str, pod: &str) -> bool {
    let Some((job, pod_suffix)) = pod.rsplit_once('-') else {
        return false;
    };
    pod_suffix.len() == POD_SUFFIX_LEN && is_job_of(kindshort, name, job)
}

/// Whether `job` is a name [`job_name`] returns for `kindshort` and `name`
/// (some operation, attempt and hash6): the Job half of [`owns_pod`], also
/// used to check the `related` Job of a ForceUnlocked Event.
pub fn is_job_of(kindshort: &str, name: &str, job: &str) -> bool {
    // hash6 is deliberately not validated: Go accepts any text here.
    let Some((rest, hash6)) = job.rsplit_once('-') else {
        return false;
    };
    let Some((rest, a)) = rest.rsplit_once('-') else {
        return false;
    };
    if a.len() < 2 {
        return false;
    }
    let Some(digits) = a.strip_prefix('a') else {
        return false;
    };
    let Some(attempt) = parse_go_int32(digits) else {
        return false;
    };
    let Some((_, op)) = rest.rsplit_once('-') else {
        return false;
    };
    let Some(op) = Op::parse(op) else {
        return false;
    };
    job_name(kindshort, name, op, attempt, hash6) == job
}

/// Go's `strconv.ParseInt(s, 10, 32)`: an optional `+` or `-`, then one or
/// more ASCII digits and nothing else, within the i32 range. Leading zeros
/// are allowed ("01" is 1); underscores are not (base 10 is explicit).
fn parse_go_int32(s: &str) -> Option<i32> {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'+') => (false, s.get(1..)?),
        Some(b'-') => (true, s.get(1..)?),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulate in i64 and stop as soon as the magnitude leaves the i32
    // range, so arbitrarily long digit strings cannot overflow.
    let limit: i64 = if negative {
        -i64::from(i32::MIN)
    } else {
        i64::from(i32::MAX)
    };
    let mut value: i64 = 0;
    for c in digits.bytes() {
        if !c.is_ascii_digit() {
            return None;
        }
        value = value * 10 + i64::from(c - b'0');
        if value > limit {
            return None;
        }
    }
    let value = if negative { -value } else { value };
    i32::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// Independent computation of CAPTF's hashed name segment.
    fn hash16(name: &str) -> String {
        hex::encode(Sha256::digest(name.as_bytes()))[..16].to_owned()
    }

    #[test]
    fn ops() {
        let names = ["apply", "destroy", "refresh", "drift", "restore", "plan"];
        assert_eq!(Op::ALL.len(), names.len());
        for (op, want) in Op::ALL.into_iter().zip(names) {
            assert_eq!(op.as_str(), want);
            assert_eq!(op.to_string(), want);
            assert_eq!(Op::parse(want), Some(op));
        }
        for bad in ["", "Apply", "APPLY", "bogus", "force-unlock", " apply"] {
            assert_eq!(Op::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn captf_name_vector() {
        assert_eq!(
            job_name("m", "web", Op::Apply, 3, "abcdef"),
            "captf-m-web-apply-a3-abcdef"
        );
    }

    #[test]
    fn captf_own_pods() {
        for pod in [
            "captf-m-web-apply-a1-abc123-x7k2p",
            "captf-m-web-restore-a2-abc123-x7k2p",
            "captf-m-web-plan-a1-abc123-x7k2p",
        ] {
            assert!(owns_pod("m", "web", pod), "{pod}");
        }
        assert!(owns_pod(
            "m",
            "web-1",
            "captf-m-web-1-drift-a12-abc123-x7k2p"
        ));
        let long = "n".repeat(60);
        assert!(owns_pod(
            "m",
            &long,
            "captf-m-fb886b452111b2ed-destroy-a3-abc123-x7k2p"
        ));
        // The CAPTF vector agrees with an independent sha256.
        assert_eq!(hash16(&long), "fb886b452111b2ed");
    }

    #[test]
    fn captf_not_own_pods() {
        for pod in [
            "captf-c-web-apply-a1-abc123-x7k2p",
            "captf-m-web-1-apply-a1-abc123-x7k2p",
            "captf-m-web-apply-a1-abc123",
            "captf-m-web-bogus-a1-abc123-x7k2p",
            "captf-m-web-apply-1-abc123-x7k2p",
            "captf-m-web-apply-ax-abc123-x7k2p",
            "laptop",
            "",
        ] {
            assert!(!owns_pod("m", "web", pod), "{pod:?}");
        }
    }

    #[test]
    fn every_op_is_recognised() {
        for op in Op::ALL {
            let pod = format!("captf-m-web-{}-a1-abc123-x7k2p", op.as_str());
            assert!(owns_pod("m", "web", &pod), "{pod}");
        }
    }

    #[test]
    fn attempt_bounds() {
        assert!(owns_pod("m", "web", "captf-m-web-apply-a0-abc123-x7k2p"));
        assert!(owns_pod(
            "m",
            "web",
            "captf-m-web-apply-a2147483647-abc123-x7k2p"
        ));
        // Out of int32 range: ParseInt fails.
        assert!(!owns_pod(
            "m",
            "web",
            "captf-m-web-apply-a2147483648-abc123-x7k2p"
        ));
        // "a-2147483649" splits at its '-': the segment is "2147483649".
        assert!(!owns_pod(
            "m",
            "web",
            "captf-m-web-apply-a-2147483649-abc123-x7k2p"
        ));
    }

    #[test]
    fn non_canonical_attempts_parse_but_do_not_rebuild() {
        // "01" and "+1" parse as 1, but the rebuilt name says "a1".
        assert_eq!(parse_go_int32("01"), Some(1));
        assert_eq!(parse_go_int32("+1"), Some(1));
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a01-abc123-x7k2p"));
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a+1-abc123-x7k2p"));
        // "a-1": cutting at the last '-' gives hash6 "abc123", then "1"
        // (no leading 'a'), so it is rejected before any parsing.
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a-1-abc123-x7k2p"));
        // Even a Job CAPTF would name with attempt -1 is not recognised,
        // exactly like Go.
        let job = job_name("m", "web", Op::Apply, -1, "abc123");
        assert_eq!(job, "captf-m-web-apply-a-1-abc123");
        assert!(!owns_pod("m", "web", &format!("{job}-x7k2p")));
    }

    #[test]
    fn hash6_is_not_validated() {
        assert!(owns_pod("m", "web", "captf-m-web-apply-a1-zz-x7k2p"));
        assert!(owns_pod("m", "web", "captf-m-web-apply-a1--x7k2p"));
    }

    #[test]
    fn pod_suffix_must_be_five_bytes() {
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a1-abc123-x7k2"));
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a1-abc123-x7k2pq"));
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a1-abc123-"));
        // Five characters but six bytes.
        assert!(!owns_pod("m", "web", "captf-m-web-apply-a1-abc123-x7k2é"));
    }

    #[test]
    fn kindshort_must_match() {
        let pod = "captf-mp-web-apply-a1-abc123-x7k2p";
        assert!(owns_pod("mp", "web", pod));
        assert!(!owns_pod("m", "web", pod));
        // "captf-m-p-web-..." differs from "captf-mp-web-..." by a '-'.
        assert!(!owns_pod("m", "p-web", pod));
        assert!(!owns_pod("mp", "web", "captf-m-web-apply-a1-abc123-x7k2p"));
        assert!(!owns_pod("c", "web", "captf-m-web-apply-a1-abc123-x7k2p"));
    }

    #[test]
    fn names_containing_op_like_segments() {
        let name = "x-apply-a1-y";
        let pod = "captf-m-x-apply-a1-y-destroy-a2-abc123-x7k2p";
        assert!(owns_pod("m", name, pod));
        // The segment-looking part of the name is not taken for the op.
        assert!(!owns_pod("m", "x", pod));
        assert!(!owns_pod("m", "x-apply-a1", pod));
        assert!(!owns_pod("m", name, "captf-m-x-apply-a1-y-x7k2p"));
    }

    #[test]
    fn length_boundary_57_58() {
        let fixed = "captf-m--apply-a1-abc123".len();
        let fits = "x".repeat(MAX_JOB_NAME_LEN - fixed);
        let over = "x".repeat(MAX_JOB_NAME_LEN - fixed + 1);

        let at57 = job_name("m", &fits, Op::Apply, 1, "abc123");
        assert_eq!(at57.len(), 57);
        assert_eq!(at57, format!("captf-m-{fits}-apply-a1-abc123"));
        assert!(owns_pod("m", &fits, &format!("{at57}-x7k2p")));

        let hashed = job_name("m", &over, Op::Apply, 1, "abc123");
        assert_eq!(hashed, format!("captf-m-{}-apply-a1-abc123", hash16(&over)));
        assert!(owns_pod("m", &over, &format!("{hashed}-x7k2p")));
        // The unhashed 58-byte form is not what CAPTF creates.
        assert!(!owns_pod(
            "m",
            &over,
            &format!("captf-m-{over}-apply-a1-abc123-x7k2p")
        ));
    }

    #[test]
    fn length_counts_bytes_not_characters() {
        // 17 'é' are 17 characters but 34 bytes: 24 + 34 = 58 bytes.
        let name = "é".repeat(17);
        let fixed = "captf-m--apply-a1-abc123".len();
        assert_eq!(fixed + name.len(), 58);
        let job = job_name("m", &name, Op::Apply, 1, "abc123");
        assert_eq!(job, format!("captf-m-{}-apply-a1-abc123", hash16(&name)));
        assert!(owns_pod("m", &name, &format!("{job}-x7k2p")));
        // 16 'é' fit (56 bytes) and stay verbatim.
        let short = "é".repeat(16);
        let job = job_name("m", &short, Op::Apply, 1, "abc123");
        assert_eq!(job, format!("captf-m-{short}-apply-a1-abc123"));
        assert!(owns_pod("m", &short, &format!("{job}-x7k2p")));
    }

    #[test]
    fn attempt_width_moves_the_boundary() {
        let fixed = "captf-m--apply-a1-abc123".len();
        let name = "x".repeat(MAX_JOB_NAME_LEN - fixed);
        // Same name, a two-digit attempt: 58 bytes, so hashed.
        let job = job_name("m", &name, Op::Apply, 10, "abc123");
        assert_eq!(job, format!("captf-m-{}-apply-a10-abc123", hash16(&name)));
        assert!(owns_pod("m", &name, &format!("{job}-x7k2p")));
    }

    #[test]
    fn go_int32_parsing() {
        let cases: [(&str, Option<i32>); 18] = [
            ("0", Some(0)),
            ("1", Some(1)),
            ("007", Some(7)),
            ("+5", Some(5)),
            ("-5", Some(-5)),
            ("-0", Some(0)),
            ("2147483647", Some(i32::MAX)),
            ("-2147483648", Some(i32::MIN)),
            ("2147483648", None),
            ("-2147483649", None),
            ("99999999999999999999999999", None),
            ("", None),
            ("+", None),
            ("-", None),
            ("1_000", None),
            (" 1", None),
            ("1 ", None),
            ("0x10", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_go_int32(s), want, "{s:?}");
            // Rust's own i32 parser follows the same grammar.
            assert_eq!(s.parse::<i32>().ok(), want, "{s:?}");
        }
        for s in ["++1", "+-1", "1e3", "١", "1.0"] {
            assert_eq!(parse_go_int32(s), None, "{s:?}");
        }
    }
}
