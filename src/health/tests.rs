//! Watch health and readiness: when a watch is up and its error episodes,
//! every registered scope holding readiness back until it is up, and how a
//! watch that never listed, or a resource never registered, settles it.

use super::*;

#[test]
fn up_drops_on_the_first_failure_and_returns_on_the_next_success() {
    let h = Health::new();
    let r = Resource::Leases;
    let id = h.register(r, "");
    assert_eq!(h.register(r, ""), id, "registration is idempotent");
    assert!(!h.watch_up(r), "not up before the first list");
    assert!(h.last_success(r).is_none());
    assert!(!h.ready());
    h.on_synced(id);
    assert!(h.watch_up(r) && h.ready());
    assert!(h.last_success(r).is_some());
    assert!(h.on_error(id, ErrorReason::Timeout), "an episode starts");
    assert!(!h.on_error(id, ErrorReason::Timeout), "repeats are not");
    assert!(
        h.on_error(id, ErrorReason::ServerError),
        "a new reason is logged"
    );
    assert!(!h.watch_up(r));
    assert!(h.ready(), "readiness is about start-up only");
    let down = h.not_up();
    assert_eq!(down.len(), 1);
    assert_eq!(down[0].reason, Some(ErrorReason::ServerError));
    assert!(matches!(h.on_success(id), Success::Recovered(_)));
    assert!(h.watch_up(r));
    assert_eq!(h.on_success(id), Success::Steady);
    assert!(h.not_up().is_empty());
    assert_eq!(h.errors(r, ErrorReason::Timeout), 2);
    assert_eq!(h.errors(r, ErrorReason::ServerError), 1);
}

#[test]
fn every_scope_must_be_up_and_the_oldest_success_is_reported() {
    let h = Health::new();
    let a = h.register(Resource::Pods, "a");
    let b = h.register(Resource::Pods, "b");
    h.on_synced(a);
    assert!(!h.watch_up(Resource::Pods), "scope b never listed");
    assert!(h.last_success(Resource::Pods).is_none());
    h.on_synced(b);
    assert!(h.watch_up(Resource::Pods));
    let oldest = h.last_success(Resource::Pods);
    h.on_success(b);
    assert_eq!(h.last_success(Resource::Pods), oldest, "a is older");
    h.on_error(a, ErrorReason::Transport);
    assert!(!h.watch_up(Resource::Pods));
}

#[test]
fn a_resource_never_registered_is_not_watched_and_has_no_say_in_readiness() {
    // What --skip-resources leaves: its watch is never registered.
    let h = Health::new();
    let leases = h.register(Resource::Leases, "");
    h.on_synced(leases);
    assert!(h.ready(), "the skipped pools do not hold readiness back");
    assert!(!h.is_watched(Resource::TerraformMachinePools));
    assert!(h.not_up().is_empty(), "a skipped resource is not down");
}

#[test]
fn a_watch_that_never_listed_is_never_up_but_settles_readiness_on_404_and_403() {
    let h = Health::new();
    let pools = h.register(Resource::TerraformMachinePools, "");
    let pods = h.register(Resource::Pods, "");
    let leases = h.register(Resource::Leases, "");
    h.on_synced(leases);
    h.on_error(pools, ErrorReason::NotFound);
    assert!(!h.ready(), "pods have not listed yet");
    h.on_error(pods, ErrorReason::ServerError);
    assert!(!h.ready(), "a 500 is worth waiting for");
    h.on_error(pods, ErrorReason::Forbidden);
    assert!(h.ready());
    assert!(!h.watch_up(Resource::TerraformMachinePools));
    h.on_success(pods);
    assert!(
        !h.watch_up(Resource::Pods),
        "a success without a first list is not up"
    );
}
