//! The guard against a fake reviewer, on a paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

/// Tokens `good` (user prom, may get /metrics) and `people` (user alice,
/// may get / and /locks/*); every other token is rejected.
#[derive(Default)]
struct Fake {
    token_calls: AtomicUsize,
    access_calls: AtomicUsize,
    down: AtomicBool,
}

impl Reviewer for Fake {
    fn token<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Identity, ReviewError>> {
        Box::pin(async move {
            self.token_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(ReviewError {
                    review: "TokenReview",
                    message: "connection refused".into(),
                });
            }
            let name = match token {
                "good" => "system:serviceaccount:monitoring:prometheus",
                "people" => "alice",
                _ => return Ok(Identity::Rejected),
            };
            Ok(Identity::Authenticated(User {
                name: name.into(),
                groups: vec!["system:authenticated".into()],
                ..User::default()
            }))
        })
    }

    fn access<'a>(
        &'a self,
        user: &'a User,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            self.access_calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(ReviewError {
                    review: "SubjectAccessReview",
                    message: "connection refused".into(),
                });
            }
            Ok(verb == "get"
                && match user.name.as_str() {
                    "alice" => path == "/" || path.starts_with("/locks/"),
                    _ => path == "/metrics",
                })
        })
    }
}

use futures::future::BoxFuture;

fn header(v: &str) -> HeaderValue {
    HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}"))
}

async fn check(g: &Guard, h: &Health, path: &str, auth: Option<&str>) -> Result<(), Refusal> {
    let value = auth.map(header);
    g.check(h, &Method::GET, path, value.as_ref()).await
}

#[tokio::test(start_paused = true)]
async fn tokens_paths_and_answers() {
    let fake = Arc::new(Fake::default());
    let g = Guard::kubernetes(fake.clone());
    let h = Health::new();
    assert!(matches!(
        check(&g, &h, "/metrics", None).await,
        Err(Refusal::Unauthenticated(_))
    ));
    assert!(matches!(
        check(&g, &h, "/metrics", Some("Basic Zm9vOmJhcg==")).await,
        Err(Refusal::Unauthenticated(_))
    ));
    assert!(matches!(
        check(&g, &h, "/metrics", Some("Bearer ")).await,
        Err(Refusal::Unauthenticated(_))
    ));
    let huge = format!("Bearer {}", "x".repeat(MAX_TOKEN_BYTES + 1));
    assert!(matches!(
        check(&g, &h, "/metrics", Some(&huge)).await,
        Err(Refusal::Unauthenticated(_))
    ));
    assert_eq!(
        fake.token_calls.load(Ordering::SeqCst),
        0,
        "no review for a missing or malformed token"
    );
    assert!(matches!(
        check(&g, &h, "/metrics", Some("Bearer stolen")).await,
        Err(Refusal::Unauthenticated(_))
    ));
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    assert_eq!(
        check(&g, &h, "/metrics", Some("bearer  good ")).await,
        Ok(())
    );
    assert_eq!(
        check(
            &g,
            &h,
            "/locks/ns/TerraformMachine/web",
            Some("Bearer good")
        )
        .await,
        Err(Refusal::Forbidden {
            user: "system:serviceaccount:monitoring:prometheus".into(),
            path: "/locks/ns/TerraformMachine/web".into()
        })
    );
    assert_eq!(
        check(
            &g,
            &h,
            "/locks/ns/TerraformMachine/web",
            Some("Bearer people")
        )
        .await,
        Ok(())
    );
    assert!(matches!(
        check(&g, &h, "/metrics", Some("Bearer people")).await,
        Err(Refusal::Forbidden { .. })
    ));
    // Probes need nothing and are not counted.
    for open in ["/healthz", "/readyz", "/livez", "/live", "/ready"] {
        assert_eq!(check(&g, &h, open, None).await, Ok(()));
    }
    assert_eq!(h.auth(AuthResult::Unauthenticated), 5);
    assert_eq!(h.auth(AuthResult::Allowed), 3);
    assert_eq!(h.auth(AuthResult::Forbidden), 2);
    // --auth=none lets everything through.
    assert_eq!(check(&Guard::Open, &h, "/metrics", None).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn ten_scrapes_a_second_cost_a_few_reviews_a_minute() {
    let fake = Arc::new(Fake::default());
    let g = Guard::kubernetes(fake.clone());
    let h = Health::new();
    // Ten minutes of 10 scrapes a second with one token.
    for _ in 0..6000 {
        assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    let tokens = fake.token_calls.load(Ordering::SeqCst);
    let access = fake.access_calls.load(Ordering::SeqCst);
    // One TokenReview a minute, one SubjectAccessReview every five.
    assert!(
        (10..=11).contains(&tokens),
        "{tokens} TokenReviews in 10 min"
    );
    assert!(
        (2..=3).contains(&access),
        "{access} SubjectAccessReviews in 10 min"
    );
    assert_eq!(h.reviews(Review::Token, Outcome::Ok), tokens as u64);
}

#[tokio::test(start_paused = true)]
async fn an_api_outage_keeps_known_callers_in_for_ten_minutes_and_nobody_new() {
    let fake = Arc::new(Fake::default());
    let g = Guard::kubernetes(fake.clone());
    let h = Health::new();
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    fake.down.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(120)).await;
    // Token past its minute: the review fails, the cached identity stands in.
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    assert!(h.reviews(Review::Token, Outcome::Error) >= 1);
    // A token never seen is not let in.
    assert_eq!(
        check(&g, &h, "/metrics", Some("Bearer people")).await,
        Err(Refusal::Unavailable)
    );
    tokio::time::advance(Duration::from_secs(600)).await;
    assert_eq!(
        check(&g, &h, "/metrics", Some("Bearer good")).await,
        Err(Refusal::Unavailable)
    );
    assert_eq!(h.auth(AuthResult::Unavailable), 2);
    fake.down.store(false, Ordering::SeqCst);
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
}

#[test]
fn verbs_and_access_keys() {
    assert_eq!(verb(&Method::GET), "get");
    assert_eq!(verb(&Method::HEAD), "get");
    assert_eq!(verb(&Method::POST), "post");
    let u = |groups: &[&str]| User {
        name: "a".into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..User::default()
    };
    // Moving a string from one field to the next gives another key.
    assert_ne!(
        access_key(&u(&["b", "c"]), "get", "/"),
        access_key(&u(&["bc"]), "get", "/")
    );
    assert_ne!(
        access_key(&u(&[]), "get", "/metrics"),
        access_key(&u(&[]), "get", "/")
    );
    assert_eq!(
        access_key(&u(&["x"]), "get", "/"),
        access_key(&u(&["x"]), "get", "/")
    );
}
