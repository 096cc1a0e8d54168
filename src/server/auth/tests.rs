//! The guard against a fake reviewer, on a paused clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::review::Answer;
use super::*;
use crate::health::Outcome;

/// Tokens `good` (user prom, may get /metrics) and `people` (user alice,
/// may get / and /locks/*); a token `tenant-N` is a tenant's own
/// ServiceAccount, accepted but allowed nothing; every other token is rejected, and a token
/// starting with `slow` is never answered. `down`: no review is answered;
/// `refusing`: the API server refuses the exporter's reviews (403).
#[derive(Default)]
struct Fake {
    token_calls: AtomicUsize,
    access_calls: AtomicUsize,
    down: AtomicBool,
    refusing: AtomicBool,
}

impl Fake {
    fn failure(&self, review: &'static str) -> Option<ReviewError> {
        if self.refusing.load(Ordering::SeqCst) {
            return Some(ReviewError {
                review,
                kind: Failure::Refused,
                message: "the exporter may not create it".into(),
            });
        }
        self.down.load(Ordering::SeqCst).then(|| ReviewError {
            review,
            kind: Failure::Unanswered,
            message: "connection refused".into(),
        })
    }
}

impl Reviewer for Fake {
    fn token<'a>(&'a self, token: &'a str) -> Answer<'a, Identity> {
        Box::pin(async move {
            self.token_calls.fetch_add(1, Ordering::SeqCst);
            if let Some(err) = self.failure("TokenReview") {
                return Err(err);
            }
            if token.starts_with("slow") {
                std::future::pending::<()>().await;
            }
            let name = match token {
                "good" => "system:serviceaccount:monitoring:prometheus".to_string(),
                "people" => "alice".to_string(),
                t if t.starts_with("tenant-") => format!("system:serviceaccount:tenant:{t}"),
                _ => return Ok(Identity::Rejected),
            };
            Ok(Identity::Authenticated(User {
                name,
                groups: vec!["system:authenticated".into()],
                ..User::default()
            }))
        })
    }

    fn access<'a>(&'a self, user: &'a User, verb: &'a str, path: &'a str) -> Answer<'a, bool> {
        Box::pin(async move {
            self.access_calls.fetch_add(1, Ordering::SeqCst);
            if let Some(err) = self.failure("SubjectAccessReview") {
                return Err(err);
            }
            Ok(verb == "get"
                && match user.name.as_str() {
                    "alice" => path == "/" || path.starts_with("/locks/"),
                    n if n.starts_with("system:serviceaccount:tenant:") => false,
                    _ => path == "/metrics",
                })
        })
    }
}

fn header(v: &str) -> HeaderValue {
    HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}"))
}

/// A guard over a fresh [`Fake`], and the health it counts in.
fn guarded() -> (Arc<Fake>, Guard, Arc<Health>) {
    let fake = Arc::new(Fake::default());
    (
        fake.clone(),
        Guard::kubernetes(fake),
        Arc::new(Health::new()),
    )
}

async fn check(g: &Guard, h: &Arc<Health>, path: &str, auth: Option<&str>) -> Result<(), Refusal> {
    let value = auth.map(header);
    g.check(h, &Method::GET, path, value.as_ref()).await
}

#[tokio::test(start_paused = true)]
async fn tokens_paths_and_answers() {
    let (fake, g, h) = guarded();
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
    let (fake, g, h) = guarded();
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
    let (fake, g, h) = guarded();
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

/// An API server that works on every review until the test answers it:
/// a review it started stays running there when the exporter drops the
/// call (the request was sent), so `running` is what the API server bears.
struct SlowApi {
    answers: tokio::sync::Semaphore,
    started: tokio::sync::watch::Sender<usize>,
    running: AtomicUsize,
    most_running: AtomicUsize,
}

impl SlowApi {
    fn new() -> Self {
        SlowApi {
            answers: tokio::sync::Semaphore::new(0),
            started: tokio::sync::watch::Sender::new(0),
            running: AtomicUsize::new(0),
            most_running: AtomicUsize::new(0),
        }
    }
}

impl Reviewer for SlowApi {
    fn token<'a>(&'a self, _token: &'a str) -> Answer<'a, Identity> {
        Box::pin(async move {
            // Sent when first polled.
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_running.fetch_max(now, Ordering::SeqCst);
            self.started.send_modify(|n| *n += 1);
            if let Ok(answer) = self.answers.acquire().await {
                answer.forget();
            }
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(Identity::Rejected)
        })
    }

    fn access<'a>(&'a self, _user: &'a User, _verb: &'a str, _path: &'a str) -> Answer<'a, bool> {
        Box::pin(async { Ok(false) })
    }
}

fn random_tokens(
    g: &Guard,
    h: &Arc<Health>,
    tag: &str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<(), Refusal>>> {
    (0..n)
        .map(|i| {
            let (g, h, auth) = (g.clone(), h.clone(), format!("Bearer {tag}-{i}"));
            tokio::spawn(async move { check(&g, &h, "/metrics", Some(&auth)).await })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn callers_dropped_mid_review_neither_leak_nor_start_more_reviews() {
    let api = Arc::new(SlowApi::new());
    let g = Guard::kubernetes(api.clone());
    let Guard::Kubernetes(reviews) = &g else {
        panic!("a kubernetes guard")
    };
    let h = Arc::new(Health::new());
    // 20 random tokens; every review slot taken, then every caller hangs up.
    let first = random_tokens(&g, &h, "a", 20);
    let mut started = api.started.subscribe();
    let full = started.wait_for(|n| *n >= MAX_REVIEWS_IN_FLIGHT);
    assert!(tokio::time::timeout(Duration::from_secs(1), full)
        .await
        .is_ok_and(|r| r.is_ok()));
    for t in &first {
        t.abort();
    }
    for t in first {
        let _ = t.await;
    }
    assert_eq!(
        reviews.tokens.in_flight(),
        0,
        "no entry left by a caller gone"
    );
    // 20 more while the API server still works on the first reviews.
    let second = random_tokens(&g, &h, "b", 20);
    let _ = tokio::time::timeout(Duration::from_secs(3), futures::future::join_all(second)).await;
    let most = api.most_running.load(Ordering::SeqCst);
    assert!(
        most <= MAX_REVIEWS_IN_FLIGHT,
        "{most} reviews running at once on the API server"
    );
    // Once the API server answers, the slots come back.
    api.answers.add_permits(MAX_REVIEWS_IN_FLIGHT + 1);
    assert!(matches!(
        check(&g, &h, "/metrics", Some("Bearer c")).await,
        Err(Refusal::Unauthenticated(_))
    ));
    assert_eq!(reviews.tokens.in_flight(), 0);
}

const PAGE: &str = "/locks/ns/TerraformMachine/web";

#[tokio::test(start_paused = true)]
async fn an_api_outage_never_serves_the_pages_from_older_answers() {
    let (fake, g, h) = guarded();
    assert_eq!(check(&g, &h, PAGE, Some("Bearer people")).await, Ok(()));
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    fake.down.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(120)).await;
    // Both tokens past their minute, the API server not answering: the
    // scrape stays in, the page with lock IDs and release commands does not.
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    let page = check(&g, &h, PAGE, Some("Bearer people")).await;
    assert_ne!(page, Ok(()), "a page served on a stale answer");
    assert_eq!(page, Err(Refusal::Unavailable));
    assert_eq!(check(&g, &h, "/", Some("Bearer people")).await, page);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_of_the_exporters_own_review_never_falls_back() {
    let (fake, g, h) = guarded();
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    // The exporter's ClusterRole lost create on tokenreviews.
    fake.refusing.store(true, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(120)).await;
    let scrape = check(&g, &h, "/metrics", Some("Bearer good")).await;
    assert_ne!(
        scrape,
        Ok(()),
        "a 403 to the exporter's own review let a stale answer in"
    );
    assert_eq!(scrape, Err(Refusal::ReviewRefused));
    assert_eq!(h.auth(AuthResult::Unavailable), 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_review_queue_never_falls_back() {
    let (fake, g, h) = guarded();
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    tokio::time::advance(Duration::from_secs(120)).await;
    // Random tokens whose reviews take every slot.
    let flood = random_tokens(&g, &h, "slow", MAX_REVIEWS_IN_FLIGHT);
    let calls = || fake.token_calls.load(Ordering::SeqCst);
    let started = async {
        while calls() < 1 + MAX_REVIEWS_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
    };
    assert!(tokio::time::timeout(Duration::from_secs(1), started)
        .await
        .is_ok());
    let scrape = check(&g, &h, "/metrics", Some("Bearer good")).await;
    assert_ne!(scrape, Ok(()), "a full local queue let a stale answer in");
    assert_eq!(scrape, Err(Refusal::Busy));
    for t in flood {
        t.abort();
    }
}

/// Counts the warnings logged while it is the default subscriber.
struct Warnings(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_outage_is_one_warning_and_every_failure_is_counted() {
    use tracing_subscriber::layer::SubscriberExt;
    let warnings = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(Warnings(warnings.clone()));
    let _default = tracing::subscriber::set_default(subscriber);
    let (fake, g, h) = guarded();
    fake.down.store(true, Ordering::SeqCst);
    for i in 0..100 {
        let auth = format!("Bearer t-{i}");
        assert_eq!(
            check(&g, &h, "/metrics", Some(&auth)).await,
            Err(Refusal::Unavailable)
        );
    }
    assert_eq!(h.reviews(Review::Token, Outcome::Error), 100);
    assert_eq!(warnings.load(Ordering::SeqCst), 1, "one warning per outage");
    // Answered again, then a second outage: a second warning.
    fake.down.store(false, Ordering::SeqCst);
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    fake.down.store(true, Ordering::SeqCst);
    for i in 0..10 {
        let auth = format!("Bearer u-{i}");
        assert!(check(&g, &h, "/metrics", Some(&auth)).await.is_err());
    }
    assert_eq!(warnings.load(Ordering::SeqCst), 2);
    // A new cause within the outage is worth a warning of its own.
    fake.refusing.store(true, Ordering::SeqCst);
    assert!(check(&g, &h, "/metrics", Some("Bearer v")).await.is_err());
    assert!(check(&g, &h, "/metrics", Some("Bearer w")).await.is_err());
    assert_eq!(warnings.load(Ordering::SeqCst), 3);
}

/// A full cache dropped its oldest answer whatever it
/// held, so about 1,100 requests with random tokens in ten seconds pushed
/// Prometheus' identity out: its next scrape cost a TokenReview, and in an
/// API outage nothing was left to stand in for it.
#[tokio::test(start_paused = true)]
async fn random_tokens_cannot_push_an_allowed_identity_out_of_the_cache() {
    let (fake, g, h) = guarded();
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    let flood = CACHE_CAPACITY + 100;
    for i in 0..flood {
        let auth = format!("Bearer random-{i}");
        assert!(matches!(
            check(&g, &h, "/metrics", Some(&auth)).await,
            Err(Refusal::Unauthenticated(_))
        ));
        if i % 100 == 0 {
            tokio::time::advance(Duration::from_millis(800)).await;
        }
    }
    let calls = fake.token_calls.load(Ordering::SeqCst);
    assert_eq!(calls, 1 + flood, "one TokenReview per random token");
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    assert_eq!(
        fake.token_calls.load(Ordering::SeqCst),
        calls,
        "the cached identity was pushed out by rejected tokens: a new TokenReview"
    );
    // Past its minute, the API server down: the older answer stands in.
    tokio::time::advance(Duration::from_secs(120)).await;
    fake.down.store(true, Ordering::SeqCst);
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    let Guard::Kubernetes(reviews) = &g else {
        panic!("a kubernetes guard")
    };
    assert!(
        reviews.tokens.len() <= 2 * CACHE_CAPACITY,
        "{} answers cached",
        reviews.tokens.len()
    );
}

/// A token the API server accepts but RBAC denies was
/// kept beside the allowed identities, so a tenant's 1,100 own
/// ServiceAccount tokens (each sent once, each answered 403) pushed
/// Prometheus' identity out, and an API outage at its next scrape found
/// nothing to stand in.
#[tokio::test(start_paused = true)]
async fn authenticated_but_denied_tokens_cannot_push_an_allowed_identity_out() {
    let (fake, g, h) = guarded();
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    let flood = 1_100;
    for i in 0..flood {
        let auth = format!("Bearer tenant-{i}");
        assert!(
            matches!(
                check(&g, &h, "/metrics", Some(&auth)).await,
                Err(Refusal::Forbidden { .. })
            ),
            "tenant token {i} authenticates and is denied"
        );
        if i % 100 == 0 {
            tokio::time::advance(Duration::from_millis(800)).await;
        }
    }
    let calls = fake.token_calls.load(Ordering::SeqCst);
    assert_eq!(calls, 1 + flood, "one TokenReview per tenant token");
    assert_eq!(check(&g, &h, "/metrics", Some("Bearer good")).await, Ok(()));
    assert_eq!(
        fake.token_calls.load(Ordering::SeqCst),
        calls,
        "the allowed identity was pushed out by denied ones: a new TokenReview"
    );
    // Past its minute, the API server down: the older answer stands in.
    tokio::time::advance(Duration::from_secs(120)).await;
    fake.down.store(true, Ordering::SeqCst);
    assert_eq!(
        check(&g, &h, "/metrics", Some("Bearer good")).await,
        Ok(()),
        "the outage fallback lost the allowed identity"
    );
    let Guard::Kubernetes(reviews) = &g else {
        panic!("a kubernetes guard")
    };
    assert!(
        reviews.tokens.len() <= 3 * CACHE_CAPACITY,
        "{} answers cached",
        reviews.tokens.len()
    );
}
