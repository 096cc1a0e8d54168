//! What one connection's request may cost: the size of a request head.

use super::*;
use crate::server::auth::review::Answer;
use crate::server::auth::{Identity, User, MAX_TOKEN_BYTES};

/// Tokens that begin with `prometheus` may get every path.
struct LongTokens;

impl crate::server::auth::Reviewer for LongTokens {
    fn token<'a>(&'a self, token: &'a str) -> Answer<'a, Identity> {
        Box::pin(async move {
            Ok(if token.starts_with("prometheus") {
                Identity::Authenticated(User {
                    name: "system:serviceaccount:monitoring:prometheus".into(),
                    ..User::default()
                })
            } else {
                Identity::Rejected
            })
        })
    }

    fn access<'a>(&'a self, _user: &'a User, _verb: &'a str, _path: &'a str) -> Answer<'a, bool> {
        Box::pin(async { Ok(true) })
    }
}

/// Hyper read up to about 408 KiB of request head per
/// connection, 128 connections about 51 MiB, where a GET with the longest
/// token the guard looks at needs a little over 16 KiB.
#[tokio::test(start_paused = true)]
async fn a_request_head_past_the_limit_is_refused_and_a_long_token_is_not() {
    let h = Harness::start_with(
        Config::DEFAULT,
        Endpoint {
            transport: Transport::Plain,
            guard: Guard::kubernetes(Arc::new(LongTokens)),
        },
    );
    hold_a_lock(&h.shared);
    // A 4 KiB token, as a projected ServiceAccount token with many
    // claims may be: a scrape as usual.
    let token = format!("prometheus{}", "t".repeat(4096));
    let mut io = h.connect();
    let auth = format!("Authorization: Bearer {token}\r\n");
    let Some(scrape) = get(&mut io, "/metrics", &auth).await else {
        panic!("a scrape with a 4 KiB token got no answer");
    };
    assert!(scrape.head.starts_with("HTTP/1.1 200"), "{}", scrape.head);
    // The longest token the guard refuses itself still reaches the guard.
    let over = format!("prometheus{}", "t".repeat(MAX_TOKEN_BYTES));
    let mut io = h.connect();
    let auth = format!("Authorization: Bearer {over}\r\n");
    let Some(refused) = get(&mut io, "/metrics", &auth).await else {
        panic!("a token over {MAX_TOKEN_BYTES} bytes got no answer");
    };
    assert!(refused.head.starts_with("HTTP/1.1 401"), "{}", refused.head);
    // A 48 KiB head: 431, never read whole, and the connection closed.
    let mut io = h.connect();
    let pad = format!("X-Pad: {}\r\n", "p".repeat(48 * 1024));
    let big = get(&mut io, "/healthz", &pad).await;
    assert!(
        big.as_ref()
            .is_some_and(|r| r.head.starts_with("HTTP/1.1 431")),
        "a 48 KiB request head was read: {:?}",
        big.map(|r| r.head)
    );
    assert!(closed(&mut io).await, "open after a 431");
}
