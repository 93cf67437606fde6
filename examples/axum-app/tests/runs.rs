//! The example runs and limits: 10 at once, then 429 with the fields.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_example_admits_its_burst_then_refuses() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_axum-app"))
        .env("SLUICE_EXAMPLE_ADDR", "127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _guard = Kill(child);
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("axum-app: listening on ")
        .expect("the listening line")
        .to_owned();

    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let r = client.get(&url).send().await.unwrap();
        assert!(r.headers().contains_key("ratelimit-policy"));
        statuses.push(r.status().as_u16());
    }
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    // 10 at once, plus at most one refill at 5/s during the loop.
    assert!((10..=11).contains(&admitted), "{statuses:?}");
    assert_eq!(statuses[..10], [200; 10]);
    assert_eq!(*statuses.last().unwrap(), 429);
}
