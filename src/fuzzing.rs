//! Entry points of the fuzz targets (`fuzz/`, run with `cargo fuzz`) and of
//! the replay of their corpus in the test suite (`tests/fuzz_corpus.rs`).
//! Each takes arbitrary bytes, as cluster data can be, must never panic,
//! and asserts what holds for every input.

use std::time::{Duration, SystemTime};

use kube::api::WatchEvent;
use serde::de::DeserializeOwned;

use crate::core::jobname::{is_job_of, owns_pod};
use crate::core::kind::Kind;
use crate::core::lockinfo::{holder_host, parse_lock_info_bytes};
use crate::core::podname::{check_pod_name, PodName};
use crate::index::{Index, IndexResource, LockLease, MAX_LABEL_BYTES};
use crate::watch::slim::{CapiClusterObject, EventObject, LeaseObject, PodObject, TerraformObject};
use crate::watch::trim;

/// The lock-info decoder: any bytes give a verdict; an accepted document
/// yields a holder host that ends `Who`, and label values within the cap.
pub fn lock_info(data: &[u8]) {
    let Ok(info) = parse_lock_info_bytes(data) else {
        return;
    };
    if let Some(host) = holder_host(&info.who) {
        assert!(!host.is_empty() && info.who.ends_with(host));
    }
    let lease = LockLease::new(
        "ns".into(),
        "0123456789abcdef-m".into(),
        Some("TerraformMachine"),
        None,
        "holder".into(),
        Ok(Some(info)),
    );
    assert!(lease.holder_label().len() <= MAX_LABEL_BYTES);
    assert!(lease.lock_id_label().len() <= MAX_LABEL_BYTES);
}

/// Own-pod recognition: `kind-selector \n name \n pod`. A pod the rule
/// accepts is a Job name the rule gives plus a five-byte suffix; a host
/// that is a valid pod name carries no byte that could steer a request.
pub fn own_pod(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(3, '\n');
    let (Some(sel), Some(name), Some(pod)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let short = ["c", "m", "mp"][sel.len() % 3];
    if owns_pod(short, name, pod) {
        let (job, suffix) = pod.rsplit_once('-').unwrap_or(("", ""));
        assert_eq!(suffix.len(), 5, "{pod:?}");
        assert!(is_job_of(short, name, job), "{pod:?}");
    }
    if check_pod_name(pod) == PodName::Valid {
        assert!(
            pod.len() <= 253 && !pod.contains(['/', '?', '%', '#', ' ']),
            "{pod:?}"
        );
    }
}

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn decode<K: DeserializeOwned>(line: &[u8]) -> Option<(K, bool)> {
    match serde_json::from_slice::<WatchEvent<K>>(line).ok()? {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => Some((o, true)),
        WatchEvent::Deleted(o) => Some((o, false)),
        WatchEvent::Bookmark(_) | WatchEvent::Error(_) => None,
    }
}

fn feed<T>(ix: &mut Index, key: <Index as IndexResource<T>>::Key, item: Option<T>, applied: bool)
where
    Index: IndexResource<T>,
{
    let _ = match (item, applied) {
        (Some(item), true) => ix.apply(key, item, now()),
        _ => IndexResource::<T>::delete(ix, key, now()),
    };
}

/// One watch event line of one resource (the first byte picks which),
/// decoded as the watchers decode it, trimmed, and applied to an index,
/// which is then read as `/metrics` reads it.
pub fn watch_line(data: &[u8]) {
    let Some((sel, line)) = data.split_first() else {
        return;
    };
    let mut ix = Index::new();
    match sel % 7 {
        0 => {
            if let Some((o, a)) = decode::<LeaseObject>(line) {
                let (k, v) = trim::lease(&o);
                feed(&mut ix, k, v, a);
            }
        }
        1 => {
            if let Some((o, a)) = decode::<PodObject>(line) {
                let (k, v) = trim::pod(&o);
                feed(&mut ix, k, v, a);
            }
        }
        2 => {
            if let Some((o, a)) = decode::<EventObject>(line) {
                let (k, v) = trim::force_unlock_event(&o);
                feed(&mut ix, k, v, a);
            }
        }
        3 => {
            if let Some((o, a)) = decode::<CapiClusterObject>(line) {
                let (k, v) = trim::capi_cluster(&o);
                feed(&mut ix, k, v, a);
            }
        }
        n => {
            let kind = Kind::ALL[usize::from(n - 4) % Kind::ALL.len()];
            if let Some((o, a)) = decode::<TerraformObject>(line) {
                let (k, v) = trim::terraform_object(kind, &o);
                feed(&mut ix, k, v, a);
            }
        }
    }
    ix.for_each_lock(|v| {
        let _ = v.age(now());
        assert!(v.lease.holder_label().len() <= MAX_LABEL_BYTES);
    });
    let _ = ix.newly_overdue(now() + Duration::from_secs(86_400));
}

/// One frame of a protobuf watch of Leases (`crate::watch::proto`), read as
/// the Lease watch reads it, trimmed and applied to an index, then read as
/// `/metrics` reads it: any bytes give an event or an error, never a panic.
pub fn watch_frame(data: &[u8]) {
    let kind = <LeaseObject as crate::watch::proto::Protobuf>::PROTOBUF;
    let Some(kind) = kind else {
        panic!("Leases have a protobuf reader");
    };
    let (o, applied) = match crate::watch::proto::watch_event(data, kind) {
        Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, true),
        Ok(WatchEvent::Deleted(o)) => (o, false),
        Ok(WatchEvent::Bookmark(_) | WatchEvent::Error(_)) | Err(_) => return,
    };
    let mut ix = Index::new();
    let (k, v) = trim::lease(&o);
    feed(&mut ix, k, v, applied);
    ix.for_each_lock(|v| {
        let _ = v.age(now());
        assert!(v.lease.holder_label().len() <= MAX_LABEL_BYTES);
        assert!(v.lease.lock_id_label().len() <= MAX_LABEL_BYTES);
    });
}
