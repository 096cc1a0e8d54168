//! Whether a holder host can be read as a pod name, and what CAPTF's read
//! of it would answer when it cannot.
//!
//! `owns_pod` leaves hash6 and the pod suffix unchecked, as CAPTF does, so
//! a host that passes it may hold any bytes but `-`: `/`, `?`, `%`,
//! capitals. Such a host must never reach a request path (it would steer
//! the request: `abc/12` reads a subresource, `?` starts a query). What
//! CAPTF does with it decides the verdict instead:
//!
//! - client-go refuses a name containing `/` or `%`, or equal to `.` or
//!   `..` (`IsValidPathSegmentName`): CAPTF's `c.Get` returns an error, its
//!   stale check fails and it never force-unlocks. That is CAPTF's error
//!   path, which the exporter reports as `own_unverified`.
//! - any other name is sent, and kube-apiserver answers 404 for a name no
//!   pod can have (pod names are DNS-1123 subdomains of at most 253 bytes):
//!   CAPTF calls the lock stale. The exporter knows that answer without
//!   asking: `own_stale`, with no request.

/// Longest name of a Kubernetes object that is a DNS-1123 subdomain.
pub const MAX_SUBDOMAIN_LEN: usize = 253;

/// What a holder host is, as a pod name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodName {
    /// A DNS-1123 subdomain: a pod may have this name; read it.
    Valid,
    /// client-go refuses to put it in a path: CAPTF's read errors.
    RefusedByClient,
    /// Sendable, but no pod can have it: the API server answers 404.
    CannotExist,
}

/// Classifies `host` as a pod name (see the module documentation).
pub fn check_pod_name(host: &str) -> PodName {
    if is_dns1123_subdomain(host) {
        PodName::Valid
    } else if host == "." || host == ".." || host.contains('/') || host.contains('%') {
        PodName::RefusedByClient
    } else {
        PodName::CannotExist
    }
}

/// Kubernetes' `IsDNS1123Subdomain`: at most 253 bytes of dot-separated
/// labels, each of lowercase ASCII letters, digits and `-`, starting and
/// ending with a letter or digit.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    if s.is_empty() || s.len() > MAX_SUBDOMAIN_LEN {
        return false;
    }
    s.split('.').all(|label| {
        let b = label.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => {
                alnum(first) && alnum(last) && b.iter().all(|c| alnum(c) || *c == b'-')
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_as_kubernetes_validates_them() {
        for ok in [
            "a",
            "captf-m-web-apply-a1-abc123-x7k2p",
            "a.b-c.d",
            "0",
            &"a".repeat(253),
        ] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a..b",
            ".a",
            "a.",
            "a_b",
            "é",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn hosts_client_go_refuses_take_captfs_error_path() {
        for host in [
            "captf-m-web-apply-a1-abc/12-x7k2p",
            "captf-m-web-apply-a1-a%2Fb-x7k2p",
            ".",
            "..",
        ] {
            assert_eq!(check_pod_name(host), PodName::RefusedByClient, "{host}");
        }
    }

    #[test]
    fn other_invalid_hosts_are_names_no_pod_can_have() {
        for host in [
            "captf-m-web-apply-a1-ab?c=1-x7k2p",
            "captf-m-web-apply-a1-ABC123-x7k2p",
            "captf-m-web-apply-a1-abc#1-x7k2p",
            &format!("captf-m-web-apply-a1-{}-x7k2p", "a".repeat(240)),
        ] {
            assert_eq!(check_pod_name(host), PodName::CannotExist, "{host}");
        }
        assert_eq!(
            check_pod_name("captf-m-web-apply-a1-abc123-x7k2p"),
            PodName::Valid
        );
    }
}
