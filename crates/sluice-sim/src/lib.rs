//! # sluice-sim
//!
//! The traffic-replay simulator behind `sluice simulate`: it reads an access
//! log ([`log`]: nginx's `combined` format or JSON lines), replays every
//! request at its original time through a policy on a virtual clock
//! ([`replay`]), deciding it exactly as `sluice serve` would, and reports
//! who would have been limited ([`report`], as JSON, and [`html`], as a
//! self-contained page with inline SVG charts). A request admitted under a
//! limit that settles its cost after the response is settled when it ends,
//! with the cost its line gives ([`CostField`]).
//!
//! ```
//! use sluice_sim::{Format, Options, Simulator};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = sluice_policy::Policy::from_toml("inline.toml", r#"
//!     [[limits]]
//!     name = "per-ip"
//!     key = "ip"
//!     rate = "1/min"
//!     burst = 1
//! "#)?;
//! let log = "\
//! 192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 5 \"-\" \"curl\"\n\
//! 192.0.2.1 - - [10/Oct/2000:13:55:37 -0700] \"GET / HTTP/1.1\" 200 5 \"-\" \"curl\"\n";
//! let mut sim = Simulator::new(policy, Options::new(Format::Nginx))?;
//! sim.replay(log.as_bytes())?;
//! let report = sim.report();
//! assert_eq!((report.total, report.allowed, report.limited), (2, 1, 1));
//! # Ok(()) }
//! ```

pub mod html;
pub mod log;
pub mod replay;
pub mod report;
pub mod time;

pub use log::{
    CostError, CostField, Entry, Format, HeaderKey, JsonlParser, LineError, NginxParser,
};
pub use replay::{MAX_IN_FLIGHT, Options, SimError, Simulator, Status};
pub use report::{Costs, Counts, Report, Settled};
