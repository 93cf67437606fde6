//! deploy/nginx/perimeter.conf with Debian's real nginx: coarse limit_req
//! per API key and per IP in front of an upstream.

use crate::common;

use std::time::{Duration, Instant};

use common::nginx::{Nginx, binary};
use common::{Upstream, UpstreamReply, client, send};

#[tokio::test]
async fn the_edge_limits_a_key_and_refusals_never_reach_the_upstream() {
    let Some(nginx) = binary() else {
        return;
    };
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let nginx = Nginx::perimeter(&nginx, &upstream, &[]);
    let c = client();
    let start = Instant::now();
    let mut admitted = 0;
    let mut refused = 0;
    for _ in 0..80 {
        let r = send(c.get(nginx.url("/")).header("X-Api-Key", "edge-key")).await;
        match r.status {
            200 => admitted += 1,
            429 => {
                refused += 1;
                assert_eq!(r.int_header("retry-after"), 1);
                assert_eq!(r.problem(429)["status"], 429);
            }
            other => panic!("unexpected {other}: {}", nginx.error_log()),
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    // burst=40 nodelay admits 41 at once, then 20 r/s.
    assert!(admitted >= 41, "{admitted}");
    assert!(
        admitted <= 41 + (elapsed * 20.0).ceil() as usize + 1,
        "{admitted} in {elapsed}s"
    );
    assert!(refused > 0);
    assert_eq!(upstream.arrived(), admitted);

    // Without a key only the per-IP zone counts (burst 200): not limited yet.
    for _ in 0..20 {
        assert_eq!(send(c.get(nginx.url("/"))).await.status, 200);
    }
}
