//! The Kubernetes reads: list pages, the watch and watch-list streams, and pod GETs.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use captf_lock_exporter::index::Resource;
use captf_lock_exporter::watch::Served;
use http_body_util::BodyExt;
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::*;

impl Store {
    pub(crate) fn list(
        &self,
        resource: Resource,
        ns: Option<&str>,
        q: &HashMap<String, String>,
    ) -> Response<Body> {
        let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
        // The continue token: `<list resourceVersion>:<raw index>`.
        let token = q
            .get("continue")
            .filter(|c| !c.is_empty())
            .and_then(|c| c.split_once(':'))
            .and_then(|(rv, off)| Some((rv.parse::<u64>().ok()?, off.parse::<usize>().ok()?)));
        let Some(table) = self.tables.get(&resource) else {
            return status(404, "NotFound", "not served");
        };
        let Ok(t) = table.read() else {
            return status(500, "InternalError", "poisoned");
        };
        let (rv, offset) = token.unwrap_or((t.rv, 0));
        let body = match (ns, t.pages.get(&(offset, limit))) {
            (None, Some(page)) if rv == t.rv => page.clone(),
            _ => t.page(ns, offset, limit, rv),
        };
        full(StatusCode::OK, "application/json", body)
    }

    pub(crate) fn get(&self, resource: Resource, ns: &str, name: &str) -> Response<Body> {
        let Some(Ok(t)) = self.tables.get(&resource).map(|t| t.read()) else {
            return status(500, "InternalError", "no table");
        };
        match t.by_key.get(&(ns.to_owned(), name.to_owned())) {
            Some(&k) => full(StatusCode::OK, "application/json", t.items[k].json.clone()),
            None => {
                self.count("get_not_found", resource.as_str());
                status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", resource.as_str()),
                )
            }
        }
    }

    pub(crate) fn watch(
        self: &Arc<Self>,
        resource: Resource,
        ns: Option<String>,
        q: &HashMap<String, String>,
    ) -> Response<Body> {
        let streaming = q.get("sendInitialEvents").map(String::as_str) == Some("true");
        let mut from: u64 = q
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let timeout = Duration::from_secs(
            q.get("timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1800),
        );
        let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
        let Some(Ok(t)) = self.tables.get(&resource).map(|t| t.read()) else {
            return status(500, "InternalError", "no table");
        };
        let mut sub = t.tx.subscribe();
        let mut gone = self.gone.subscribe();
        // A watch-list, as kube-apiserver streams it: every live object as
        // ADDED (the serialised bytes, shared), then the bookmark ending
        // the initial events, then the watch from the table's version.
        let initial: Vec<Bytes> = if streaming {
            from = t.rv;
            t.items
                .iter()
                .filter(|it| !it.deleted && ns.as_ref().is_none_or(|n| it.ns == *n))
                .map(|it| it.json.clone())
                .collect()
        } else {
            Vec::new()
        };
        let end_bookmark = streaming.then(|| {
            Bytes::from(format!(
                "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{}\",\"annotations\":{{\"k8s.io/initial-events-end\":\"true\"}}}}}}}}\n",
                resource.spec().kind,
                t.api_version(),
                t.rv
            ))
        });
        let expired = Bytes::from(format!(
            "{}\n",
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": format!("too old resource version: {from} ({})", t.rv),
                "reason": "Expired", "code": 410}})
        ));
        let matches = move |c: &Change, ns: &Option<String>| ns.as_ref().is_none_or(|n| *n == c.ns);
        let backlog: Vec<Change> = t
            .history
            .iter()
            .filter(|c| c.rv > from && matches(c, &ns))
            .cloned()
            .collect();
        drop(t);
        let (tx, rx) = mpsc::channel::<Bytes>(256);
        let store = self.clone();
        store.watches_open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut last = from;
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + store.bookmark_every,
                store.bookmark_every,
            );
            let mut open = true;
            for json in initial {
                let mut line = BytesMut::with_capacity(json.len() + 32);
                line.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
                line.extend_from_slice(&json);
                line.extend_from_slice(b"}\n");
                if tx.send(line.freeze()).await.is_err() {
                    open = false;
                    break;
                }
            }
            if let Some(b) = end_bookmark.filter(|_| open) {
                open = tx.send(b).await.is_ok();
            }
            for c in backlog {
                last = last.max(c.rv);
                if tx.send(c.line).await.is_err() {
                    open = false;
                    break;
                }
            }
            while open {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {
                        store.watches_timed_out.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    _ = tx.closed() => break,
                    _ = gone.recv() => {
                        store.watches_gone.fetch_add(1, Ordering::Relaxed);
                        let _ = tx.send(expired).await;
                        break;
                    }
                    _ = tick.tick(), if bookmarks => {
                        let line = store.tables.get(&resource).and_then(|t| t.read().ok().map(|t| t.bookmark()));
                        if let Some(line) = line {
                            open = tx.send(line).await.is_ok();
                        }
                    }
                    got = sub.recv() => match got {
                        Ok(c) if c.rv > last && matches(&c, &ns) => {
                            last = c.rv;
                            open = tx.send(c.line).await.is_ok();
                        }
                        Ok(_) => {}
                        // Changes were lost to this watch: end it as an
                        // API server would, so the client relists.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            store.watches_gone.fetch_add(1, Ordering::Relaxed);
                            let _ = tx.send(expired).await;
                            break;
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
            store.watches_open.fetch_sub(1, Ordering::Relaxed);
        });
        let mut r = Response::new(ChannelBody(rx).boxed());
        if let Ok(v) = "application/json".parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    }
}
