//! Settlement, debt and refund across two `sluice serve` instances on one
//! Redis, through the decision API: over a seeded random run of checks with
//! estimates and settlements above and below them, every answer matches a
//! reference model of the rules that the test computes, call by call. The
//! tokens used never exceed the quota plus the debt allowed, and no request
//! is admitted while its key is in debt.

use serde_json::json;
use sluice_testkit::{RedisServer, require_redis};

use crate::common::{Sluice, TempConfig, post_control};

const BURST: u64 = 1000;
const MAX_DEBT: u64 = 300;

/// A month's worth per month: nothing comes back while the test runs (the
/// rate gives back less than one token in a minute).
fn config() -> String {
    format!(
        r#"
[store]
timeout = "2s"

[[limits]]
name = "tokens"
key = "header:X-Api-Key"
algorithm = "gcra"
rate = "{BURST}/30d"
burst = {BURST}
cost = 50
settle = {{ estimate = "header:X-Estimate", max_debt = {MAX_DEBT} }}
"#
    )
}

/// The rules, as the test reads them: `used` units of the burst, debt
/// included.
#[derive(Debug, Default)]
struct Model {
    used: u64,
}

impl Model {
    fn check(&mut self, estimate: u64) -> bool {
        let fits = self.used + estimate <= BURST;
        if fits {
            self.used += estimate;
        }
        fits
    }

    fn settle(&mut self, charged: u64, actual: u64) -> (u64, u64, u64) {
        if actual < charged {
            let back = (charged - actual).min(self.used);
            self.used -= back;
            return (back, 0, 0);
        }
        let more = actual - charged;
        let room = (BURST + MAX_DEBT).saturating_sub(self.used);
        let debited = more.min(room);
        self.used += debited;
        (0, debited, more - debited)
    }

    fn remaining(&self) -> u64 {
        BURST.saturating_sub(self.used)
    }
}

/// A small deterministic generator (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One run of the rules against two instances on one store, call by call.
struct Run {
    instances: [Sluice; 2],
    model: Model,
    rng: Rng,
    /// Reservations not settled yet: the instance, the id, the estimate.
    open: Vec<(usize, String, u64)>,
    /// What the run went through: refusals in debt, and settlements past
    /// `max_debt`.
    refused_in_debt: u32,
    excess: u32,
}

impl Run {
    fn start(label: &str, url: &str) -> (Self, TempConfig) {
        let file = TempConfig::new(label, &config());
        let secret = ("SLUICE_KEY_SECRET", "settle-secret-shared");
        let instances = [
            Sluice::start_env(file.path(), &["--store-url", url], &[secret]),
            Sluice::start_env(file.path(), &["--store-url", url], &[secret]),
        ];
        let run = Self {
            instances,
            model: Model::default(),
            rng: Rng(0x5eed_1234_abcd_0001),
            open: Vec::new(),
            refused_in_debt: 0,
            excess: 0,
        };
        (run, file)
    }

    async fn settle_one(&mut self, step: u32) {
        let picked = usize::try_from(self.rng.below(self.open.len() as u64)).unwrap();
        let (at, id, charged) = self.open.remove(picked);
        let actual = self.rng.below(2 * charged + 120);
        let body = json!({"reservation": id, "cost": actual});
        let reply = post_control(&self.instances[at], "/v1/settle", &body).await;
        assert_eq!(reply.status, 200, "step {step}");
        let s = &reply.json()["settled"][0];
        let want = self.model.settle(charged, actual);
        let got = (
            s["refunded"].as_u64().unwrap(),
            s["debited"].as_u64().unwrap(),
            s["excess"].as_u64().unwrap(),
        );
        assert_eq!(got, want, "step {step}: settle {actual} of {charged}");
        self.excess += u32::from(want.2 > 0);
        assert!(self.model.used <= BURST + MAX_DEBT);
    }

    async fn check_one(&mut self, step: u32) {
        let at = usize::try_from(self.rng.below(2)).unwrap();
        let estimate = 1 + self.rng.below(200);
        let body = json!({
            "path": "/v1/chat/completions",
            "headers": {"X-Api-Key": "shared-key", "X-Estimate": estimate.to_string()},
        });
        let reply = post_control(&self.instances[at], "/v1/check", &body).await;
        assert!(!reply.has("sluice-fallback"), "step {step}: Redis decided");
        let in_debt = self.model.used > BURST;
        let admitted = self.model.check(estimate);
        let used = self.model.used;
        assert_eq!(
            reply.status == 200,
            admitted,
            "step {step}: check {estimate} with {used} used"
        );
        assert!(!(in_debt && admitted), "admitted in debt");
        self.refused_in_debt += u32::from(in_debt);
        let body = reply.json();
        assert_eq!(
            body["limits"][0]["remaining"].as_u64(),
            Some(self.model.remaining()),
            "step {step}"
        );
        if admitted {
            let id = body["reservation"]["id"].as_str().unwrap().to_owned();
            self.open.push((at, id, estimate));
        }
    }

    /// What is still open settles at 0: everything reserved comes back.
    async fn settle_the_rest(&mut self) {
        for (at, id, charged) in std::mem::take(&mut self.open) {
            let body = json!({"reservation": id, "cost": 0});
            let reply = post_control(&self.instances[at], "/v1/settle", &body).await;
            assert_eq!(
                reply.json()["settled"][0]["refunded"].as_u64(),
                Some(self.model.settle(charged, 0).0)
            );
        }
    }
}

/// 240 seeded steps of checks and settlements on two instances sharing the
/// store at `url`, each answer compared with the model's.
async fn settle_exactly_as_the_rules_say(label: &str, url: &str) {
    let (mut run, _file) = Run::start(label, url);
    for step in 0..240 {
        let settle_now = !run.open.is_empty() && (run.rng.below(3) == 0 || run.open.len() > 3);
        if settle_now {
            run.settle_one(step).await;
        } else {
            run.check_one(step).await;
        }
    }
    run.settle_the_rest().await;
    assert!(
        run.refused_in_debt > 0 && run.excess > 0,
        "{} refusals in debt, {} excess",
        run.refused_in_debt,
        run.excess
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_settle_exactly_as_the_rules_say() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    settle_exactly_as_the_rules_say("redis-settle", &redis.url()).await;
}

/// The same run on a three-node Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_settle_exactly_as_the_rules_say_on_a_cluster() {
    if !require_redis() {
        return;
    }
    let cluster = sluice_testkit::redis_cluster::RedisCluster::start(3);
    settle_exactly_as_the_rules_say("cluster-settle-model", &cluster.url()).await;
}

/// The same capabilities on a Redis Cluster, through the decision API of
/// two instances: a settlement above the estimate puts the key into debt
/// on both, and a concurrency slot taken on one is seen by the other until
/// it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_and_slots_hold_across_instances_on_a_cluster() {
    if !require_redis() {
        return;
    }
    let cluster = sluice_testkit::redis_cluster::RedisCluster::start(3);
    let text = format!(
        "{}\n[[limits]]\nname = \"slots\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"concurrency\"\nmax_in_flight = 1\nmatch = {{ path_prefix = \"/export\" }}\n",
        config()
    );
    let file = TempConfig::new("cluster-settle", &text);
    let secret = ("SLUICE_KEY_SECRET", "cluster-settle-secret");
    let url = cluster.url();
    let a = Sluice::start_env(file.path(), &["--store-url", &url], &[secret]);
    let b = Sluice::start_env(file.path(), &["--store-url", &url], &[secret]);
    let tokens = |key: &str, estimate: u64| json!({"path": "/v1/chat", "headers": {"X-Api-Key": key, "X-Estimate": estimate.to_string()}});
    let first = post_control(&a, "/v1/check", &tokens("c1", 100)).await;
    assert_eq!(first.status, 200);
    assert!(!first.has("sluice-fallback"), "Redis decided");
    let id = first.json()["reservation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let settled = post_control(
        &a,
        "/v1/settle",
        &json!({"reservation": id, "cost": BURST + 200}),
    )
    .await;
    assert_eq!(
        settled.json()["settled"][0]["debited"],
        BURST + 100,
        "to empty, then 200 of debt"
    );
    let refused = post_control(&b, "/v1/check", &tokens("c1", 1)).await;
    assert_eq!(refused.status, 429, "in debt, on the other instance too");
    assert_eq!(
        post_control(&b, "/v1/check", &tokens("c2", 1)).await.status,
        200
    );

    let export = json!({"path": "/export", "headers": {"X-Api-Key": "c3", "X-Estimate": "1"}});
    let held = post_control(&a, "/v1/check", &export).await;
    assert_eq!(held.status, 200);
    assert_eq!(
        post_control(&b, "/v1/check", &export).await.status,
        429,
        "the one slot is held"
    );
    let slot_id = held.json()["reservation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let released = post_control(&a, "/v1/release", &json!({"reservation": slot_id})).await;
    assert_eq!(released.status, 200);
    assert_eq!(released.json()["settled"][1]["refunded"], 1);
    // At once on the other instance: a refusal that counts on a slot is
    // never cached there (its retry time is only a hint).
    assert_eq!(
        post_control(&b, "/v1/check", &export).await.status,
        200,
        "released"
    );
}
