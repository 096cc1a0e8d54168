//! The production limits and the backoff: how soon a hung API is noticed,
//! how pauses grow, cap and reset, and how watch timeouts spread.

use super::*;

#[test]
fn backoff_grows_to_its_cap_with_jitter_and_resets() {
    let t = Timing::DEFAULT;
    let mut b = Backoff::new(t);
    let first = b.next(ErrorReason::ServerError);
    assert!(first >= t.backoff_min * 8 / 10 && first <= t.backoff_min);
    let mut last = first;
    for _ in 0..20 {
        last = b.next(ErrorReason::ServerError);
        assert!(last <= t.backoff_max);
    }
    assert!(last >= t.backoff_max * 8 / 10);
    for _ in 0..20 {
        assert!(b.next(ErrorReason::Forbidden) <= t.backoff_max_config);
    }
    b.reset();
    assert!(b.next(ErrorReason::Timeout) <= t.backoff_min);
}

#[test]
fn hung_api_detection_bound_is_under_two_minutes() {
    let t = Timing::DEFAULT;
    assert!(t.silence + t.request < Duration::from_secs(120));
}

#[test]
fn watch_timeouts_spread_over_five_to_ten_minutes() {
    let mut b = Backoff::new(Timing::DEFAULT);
    let asked: Vec<u32> = (0..200).map(|_| b.watch_seconds()).collect();
    assert!(asked.iter().all(|s| (300..600).contains(s)), "{asked:?}");
    let low = asked.iter().filter(|s| **s < 450).count();
    assert!(
        (50..150).contains(&low),
        "spread over the range: {low} of 200 below 450"
    );
}
