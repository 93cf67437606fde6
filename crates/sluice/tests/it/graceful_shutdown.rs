//! Graceful shutdown: on SIGTERM, a request in flight to a slow upstream
//! still completes, and the process exits with status 0.

#![cfg(unix)]
use crate::common;

use std::time::{Duration, Instant};

use common::{
    Sluice, UPSTREAM_BODY, Upstream, UpstreamReply, client, example_path, proxy_config, send,
};

/// A guard against hangs, not a timing assertion.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_request_in_flight_finish() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::from_secs(1),
    });
    let mut sluice = Sluice::start_with("graceful", &proxy_config(&upstream.url()));

    let request = client()
        .post(sluice.url("/slow"))
        .header("X-Api-Key", "k1")
        .body("in flight");
    let in_flight = tokio::spawn(send(request));

    // Wait until the request is at the upstream, i.e. surely in flight.
    let deadline = Instant::now() + Duration::from_secs(20);
    while upstream.arrived() == 0 {
        assert!(
            Instant::now() < deadline,
            "the request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sluice.terminate();

    let reply = in_flight.await.expect("the request task");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, UPSTREAM_BODY.as_bytes());
    reply.ratelimit();
    assert_eq!(upstream.recorded()[0].body, b"in flight");

    let status = sluice.wait_exit(EXIT_TIMEOUT);
    assert_eq!(
        status.code(),
        Some(0),
        "{status}; stderr:\n{}",
        sluice.log()
    );

    // Nothing is served any more.
    let after = client()
        .get(sluice.url("/"))
        .header("X-Api-Key", "k1")
        .send()
        .await;
    assert!(after.is_err(), "still serving after exit: {after:?}");
}

/// A stop signal (SIGTERM or SIGINT) as soon as the listening line is out
/// is still a clean stop: the line must not come before the signal handlers
/// are in place. (That race is narrow, so try a few times.)
#[test]
fn a_signal_right_after_the_listening_line_exits_0() {
    for attempt in 0..20 {
        let signal = if attempt % 2 == 0 { "TERM" } else { "INT" };
        let mut sluice = Sluice::start(&example_path("quickstart.toml"));
        sluice.signal(signal);
        let status = sluice.wait_exit(EXIT_TIMEOUT);
        assert_eq!(
            status.code(),
            Some(0),
            "attempt {attempt}, SIG{signal}: {status}; stderr:\n{}",
            sluice.log()
        );
        assert!(sluice.log().contains("sluice stopped"), "{}", sluice.log());
    }
}
