//! The demo's in-process API server, through a real `kube::Client`: it
//! answers only GET, and a list then watch sees what the simulation changes.

use std::sync::Arc;
use std::time::Duration;

use captf_lock_exporter::core::kind::Kind;
use captf_lock_exporter::demo::api;
use captf_lock_exporter::demo::objects::{lease, lock_info, pod, NS};
use captf_lock_exporter::demo::store::Store;
use captf_lock_exporter::index::Resource;
use futures::StreamExt;
use http::Request;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};

fn status_code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn answers_only_get() {
    let store = Arc::new(Store::new());
    store.put(Resource::Leases, lease(Kind::TerraformMachine, "m1", None));
    let client = api::client(store.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let name = leases
        .list(&ListParams::default())
        .await
        .expect("lists")
        .items[0]
        .metadata
        .name
        .clone()
        .expect("named");

    let copy = leases.get(&name).await.expect("gets");
    assert_eq!(
        status_code(leases.delete(&name, &DeleteParams::default()).await),
        405
    );
    assert_eq!(
        status_code(leases.replace(&name, &PostParams::default(), &copy).await),
        405
    );
    let mut fresh = copy.clone();
    fresh.metadata.name = Some("other".into());
    fresh.metadata.resource_version = None;
    assert_eq!(
        status_code(leases.create(&PostParams::default(), &fresh).await),
        405
    );
    for method in ["POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] {
        let req = Request::builder()
            .method(method)
            .uri(format!(
                "/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{name}"
            ))
            .body(Vec::new())
            .expect("request");
        let resp = client.send(req.map(Into::into)).await.expect("answered");
        assert_eq!(resp.status().as_u16(), 405, "{method}");
    }
    // Nothing was changed by any of it.
    let after = leases.get(&name).await.expect("still there");
    assert_eq!(
        after.metadata.resource_version,
        copy.metadata.resource_version
    );

    // A resource it does not serve, and an absent or forbidden pod.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    assert_eq!(status_code(maps.list(&ListParams::default()).await), 404);
    store.forbid_get(Resource::Pods, NS, "secret");
    let pods: Api<Pod> = Api::namespaced(client, NS);
    assert_eq!(status_code(pods.get("absent").await), 404);
    assert_eq!(status_code(pods.get("secret").await), 403);
}

#[tokio::test]
async fn list_then_watch_sees_a_change() {
    let store = Arc::new(Store::new());
    let held = lock_info("@runner", 5);
    store.put(
        Resource::Leases,
        lease(Kind::TerraformMachine, "m1", Some(&held)),
    );
    // Not a state lock: the exporter's selector leaves it out.
    let mut run_lease = lease(Kind::TerraformMachine, "m2", None);
    run_lease["metadata"]["labels"]["captf.io/lease"] = "run".into();
    store.put(Resource::Leases, run_lease);
    store.put(Resource::Pods, pod("runner", "Running"));

    let client = api::client(store.clone());
    let leases: Api<Lease> = Api::all(client);
    let selector = "tfstate=true,!captf.io/lease";
    let list = leases
        .list(&ListParams::default().labels(selector))
        .await
        .expect("lists");
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.expect("list version");
    assert_eq!(rv, "3");

    let params = WatchParams::default().labels(selector).timeout(2);
    let stream = leases.watch(&params, &rv).await.expect("watches");
    futures::pin_mut!(stream);

    store.put(Resource::Leases, lease(Kind::TerraformMachine, "m1", None));
    store.delete(Resource::Pods, NS, "runner");
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("decodes");
    let WatchEvent::Modified(released) = first else {
        panic!("expected MODIFIED, got {first:?}");
    };
    assert_eq!(released.metadata.resource_version.as_deref(), Some("4"));
    assert!(released.metadata.annotations.is_none());

    // The server ends the watch after timeoutSeconds, with a bookmark last.
    let mut rest = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the watch ends on its own")
    {
        rest.push(ev.expect("decodes"));
    }
    match rest.as_slice() {
        [WatchEvent::Bookmark(b)] => assert_eq!(b.metadata.resource_version, "5"),
        other => panic!("expected one bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_410() {
    let store = Arc::new(Store::new());
    // More changes than the log keeps: version 1 is gone.
    for i in 0..1100 {
        store.put(Resource::Pods, pod(&format!("p{i}"), "Running"));
    }
    let pods: Api<Pod> = Api::all(api::client(store));
    let stream = pods
        .watch(&WatchParams::default().timeout(5), "1")
        .await
        .expect("watch starts");
    futures::pin_mut!(stream);
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => assert_eq!(status.code, 410),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(stream.next().await.is_none(), "the stream ends after it");
}
