//! Costs settled after the response, replayed: each admitted request is
//! settled with its line's cost (`--cost-field`) when it ends, through
//! tokens-per-minute limits over JSON lines, response sizes over nginx
//! lines, concurrency slots held for a line's duration, a model of the
//! token bucket with debt, and the bound on requests in flight.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_sim::{Format, MAX_IN_FLIGHT, Options, Report, Simulator};

/// 6,000 tokens a minute (100 a second, exactly) with a burst of 1,000;
/// 300 reserved per call, settled from the usage, at most 500 of debt.
const TOKENS: &str = r#"
[[limits]]
name = "tokens"
key = "header:X-Api-Key"
rate = "6000/min"
burst = 1000
cost = 300
settle = { from = "usage", max_debt = 500 }
"#;

fn jsonl(cost_field: Option<&str>) -> Options {
    let mut o = Options::new(Format::Jsonl);
    o.cost_field = cost_field.map(str::to_owned);
    o
}

/// A JSON line at `ms` milliseconds for key `key`, with `rest` after the
/// request's fields.
fn line(ms: u64, key: &str, rest: &str) -> String {
    format!(
        r#"{{"time":{},"method":"POST","path":"/v1/chat/completions","ip":"192.0.2.1","headers":{{"X-Api-Key":"{key}"}}{rest}}}"#,
        1_800_000_000_000 + ms
    ) + "\n"
}

fn tokens(n: u64) -> String {
    format!(r#","usage":{{"prompt_tokens":1,"total_tokens":{n}}}"#)
}

fn replay(sim: &mut Simulator, log: &str) -> (Report, Vec<u16>) {
    let mut statuses = Vec::new();
    sim.replay_with(log.as_bytes(), |_, s| {
        statuses.push(s.http_status());
        Ok(())
    })
    .unwrap();
    (sim.report(), statuses)
}

fn limit<'r>(r: &'r Report, name: &str) -> &'r sluice_sim::report::LimitRow {
    r.by_limit
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no limit {name}: {}", r.to_json()))
}

/// Worked by hand: the bucket of key `a` (1,000 tokens, 100 a second back)
/// line by line; `b` is another key.
#[test]
fn token_counts_settle_a_tokens_per_minute_limit() {
    let log = [
        // 1000 - 300 = 700 admitted; 100 used: 200 back, 900.
        line(0, "a", &tokens(100)),
        // 900 - 300 = 600; 1200 used: 600 then 300 of debt, -300.
        line(0, "a", &tokens(1200)),
        // In debt: refused (the cost is read all the same).
        line(0, "a", &tokens(50)),
        // A second later: -200, refused.
        line(1_000, "a", &tokens(50)),
        // At 6 s: -200 + 500 = 300, admitted (0 left); no total: the
        // estimate stands.
        line(6_000, "a", r#","usage":{"prompt_tokens":7}"#),
        line(6_000, "a", &tokens(50)),
        // At 10 s: 400; admitted (100), and in flight for 2 s with 0 used.
        line(10_000, "a", &(tokens(0) + r#","duration":2.0"#)),
        // At 11 s: 200: refused, the estimate still held (settled at
        // once it would have been 500).
        line(11_000, "a", &tokens(50)),
        // At 12 s: 300, then the first ends first: 300 back, 600;
        // admitted (300). Its cost is not a number: the estimate stands.
        line(12_000, "a", r#","usage":{"total_tokens":"lots"}"#),
        // Key b: 700 left, 4700 more used: 700, then the 500 of debt, and
        // 3500 beyond it is excess.
        line(12_000, "b", &tokens(5000)),
    ]
    .concat();
    let mut sim =
        Simulator::from_toml("t.toml", TOKENS, jsonl(Some("usage.total_tokens"))).unwrap();
    let (r, statuses) = replay(&mut sim, &log);
    assert_eq!(r.bad_lines, 0, "{:?}", r.errors);
    assert_eq!(statuses, [200, 200, 429, 429, 200, 429, 200, 429, 200, 200]);
    let s = limit(&r, "tokens").settled;
    assert_eq!(s.requests, 6, "the admitted requests");
    assert_eq!(s.estimated, 6 * 300);
    // 100, 1200, the estimate (no total), 0, the estimate (not a number).
    assert_eq!(s.actual, 100 + 1200 + 300 + 300 + 5000);
    assert_eq!(s.refunded, 200 + 300);
    assert_eq!(s.debited, 900 + 1200);
    assert_eq!(s.excess, 3500);
    let c = &r.costs;
    assert_eq!(c.field, "usage.total_tokens");
    // Counted over the requests settled: a refused one's cost is unused.
    assert_eq!((c.read, c.missing, c.not_whole), (4, 1, 1));
    let lines: Vec<u64> = c.errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [5, 9]);
    assert!(c.errors[1].message.contains("`lots` is not a whole number"));
    let text = r.to_text(5);
    assert!(
        text.contains("costs from `usage.total_tokens`: 4 read, 1 missing, 1 not a whole number"),
        "{text}"
    );
    assert!(text.contains("line 9: `lots`"), "{text}");
    let html = sluice_sim::html::render(&r, "t");
    assert!(html.contains("<h2>Settled costs</h2>"), "{html}");

    // Without the cost field every settlement keeps its estimate: the
    // second call leaves 300 and the third passes.
    let mut plain = Simulator::from_toml("t.toml", TOKENS, jsonl(None)).unwrap();
    let (r, statuses) = replay(&mut plain, &log);
    assert_eq!(&statuses[..3], [200, 200, 200]);
    let s = limit(&r, "tokens").settled;
    assert_eq!((s.refunded, s.debited, s.excess), (0, 0, 0));
    assert_eq!(s.actual, s.estimated);
    assert_eq!(r.costs, sluice_sim::Costs::default());
}

/// The token bucket of [`TOKENS`], with settlements at once, as a model:
/// level in tokens, whole seconds, 100 tokens a second.
struct Bucket {
    level: i64,
    at: u64,
}

impl Bucket {
    const BURST: i64 = 1000;
    const COST: i64 = 300;
    const MAX_DEBT: i64 = 500;

    /// Decides and settles one call at second `s` with `used` tokens
    /// (`None`: the estimate stands): (admitted, refunded, debited, excess).
    fn call(&mut self, s: u64, used: Option<i64>) -> (bool, i64, i64, i64) {
        let refill = i64::try_from(s - self.at).unwrap() * 100;
        self.level = (self.level + refill).min(Self::BURST);
        self.at = s;
        if self.level < Self::COST {
            return (false, 0, 0, 0);
        }
        self.level -= Self::COST;
        let used = used.unwrap_or(Self::COST);
        if used <= Self::COST {
            // Given back, the level never above full.
            let back = Self::COST - used;
            self.level = (self.level + back).min(Self::BURST);
            return (true, back, 0, 0);
        }
        let more = used - Self::COST;
        let floor = (self.level - more).max(-Self::MAX_DEBT);
        let debited = self.level - floor;
        self.level = floor;
        (true, 0, debited, more - debited)
    }
}

#[test]
fn settlements_agree_with_a_model_of_the_bucket_with_debt() {
    let mut model = Bucket {
        level: Bucket::BURST,
        at: 0,
    };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut log, mut want) = (String::new(), Vec::new());
    let mut sums = (0, 0, 0);
    let mut s = 0;
    for _ in 0..400 {
        s += [0, 0, 0, 1, 2, 5][usize::try_from(next(6)).unwrap()];
        let used = match next(10) {
            0 => None,
            _ => Some(i64::try_from(next(1500)).unwrap()),
        };
        let rest = used.map_or(String::new(), |u| tokens(u.try_into().unwrap()));
        log += &line(s * 1000, "a", &rest);
        let (ok, back, debited, excess) = model.call(s, used);
        want.push(if ok { 200 } else { 429 });
        sums = (sums.0 + back, sums.1 + debited, sums.2 + excess);
    }
    let mut sim =
        Simulator::from_toml("t.toml", TOKENS, jsonl(Some("usage.total_tokens"))).unwrap();
    let (r, statuses) = replay(&mut sim, &log);
    assert_eq!(statuses, want);
    assert!(want.contains(&429) && want.contains(&200));
    let got = limit(&r, "tokens").settled;
    let as_u64 = |n: i64| u64::try_from(n).unwrap();
    assert_eq!(
        (got.refunded, got.debited, got.excess),
        (as_u64(sums.0), as_u64(sums.1), as_u64(sums.2))
    );
    assert!(
        got.debited > 0 && got.excess > 0 && got.refunded > 0,
        "{got:?}"
    );
}

/// Bytes per IP, 1,000 a minute, 1 reserved per request, settled from
/// the response size.
const BYTES: &str = r#"
[[limits]]
name = "bytes"
key = "ip"
rate = "1000/min"
burst = 1000
settle = { from = "body_bytes", max_debt = 1000 }
"#;

#[test]
fn nginx_response_sizes_settle_a_bytes_limit() {
    let nginx = |min: u32, bytes: &str| {
        format!(
            "192.0.2.7 - - [10/Oct/2000:13:{min:02}:00 -0700] \"GET /export HTTP/1.1\" 200 {bytes} \"-\" \"curl\"\n"
        )
    };
    let log = [
        // 999 left; 600 sent: 599 more, 400.
        nginx(1, "600"),
        // 399; 599 more: -200, in debt.
        nginx(1, "600"),
        nginx(1, "10"),
        // A minute later, 800: admitted; nothing sent (`-`): 1 back.
        nginx(2, "-"),
        // Not a size: the estimate stands.
        nginx(2, "12k"),
    ]
    .concat();
    let mut o = Options::new(Format::Nginx);
    o.cost_field = Some("body_bytes_sent".into());
    let mut sim = Simulator::from_toml("b.toml", BYTES, o).unwrap();
    let (r, statuses) = replay(&mut sim, &log);
    assert_eq!(statuses, [200, 200, 429, 200, 200]);
    let s = limit(&r, "bytes").settled;
    assert_eq!((s.requests, s.estimated, s.actual), (4, 4, 600 + 600 + 1));
    assert_eq!((s.refunded, s.debited, s.excess), (1, 599 + 599, 0));
    assert_eq!((r.costs.read, r.costs.not_whole), (3, 1));

    // Only the response size is a cost of nginx lines.
    let mut o = Options::new(Format::Nginx);
    o.cost_field = Some("tokens".into());
    let err = Simulator::from_toml("b.toml", BYTES, o).unwrap_err();
    assert!(err.to_string().contains("body_bytes_sent"), "{err}");
}

#[test]
fn a_concurrency_slot_is_held_for_the_line_duration() {
    let config = r#"
[[limits]]
name = "one-at-a-time"
key = "ip"
algorithm = "concurrency"
max_in_flight = 1
"#;
    let log = [
        // Holds the slot from 0 to 5 s.
        line(0, "a", r#","duration":5"#),
        line(2_000, "a", ""),
        // Ends at 5 s, before the next line at 5 s is decided.
        line(5_000, "a", ""),
        // The one before it had no duration: its slot came back at once.
        line(5_000, "a", r#","duration":"0.5""#),
        line(5_400, "a", ""),
        line(5_500, "a", ""),
    ]
    .concat();
    let mut sim = Simulator::from_toml("c.toml", config, jsonl(None)).unwrap();
    let (r, statuses) = replay(&mut sim, &log);
    assert_eq!(statuses, [200, 429, 200, 200, 429, 200]);
    let s = limit(&r, "one-at-a-time").settled;
    assert_eq!((s.requests, s.refunded), (4, 4), "every slot given back");
}

#[test]
fn requests_in_flight_are_bounded() {
    let config = r#"
[[limits]]
name = "tokens"
key = "ip"
rate = "1000000/s"
burst = 1000000
cost = 2
settle = {}
"#;
    let extra = 100;
    let mut log = String::new();
    for i in 0..MAX_IN_FLIGHT as u64 + extra {
        log += &line(i, "a", r#","cost":2,"duration":3600"#);
    }
    let mut sim = Simulator::from_toml("f.toml", config, jsonl(Some("cost"))).unwrap();
    let (r, statuses) = replay(&mut sim, &log);
    assert!(statuses.iter().all(|s| *s == 200));
    assert_eq!(r.costs.settled_early, extra);
    assert_eq!(
        limit(&r, "tokens").settled.requests,
        MAX_IN_FLIGHT as u64 + extra
    );
}
