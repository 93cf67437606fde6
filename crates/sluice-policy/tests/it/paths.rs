//! Every decision path checks the request's path: a path with no canonical
//! form is refused and charged nothing, and a spelling of a canonical path
//! is charged as that path, whether the policy's limits are met alike (one
//! or several: decided without a plan) or planned.

use http::{HeaderMap, Method};
use sluice_policy::{DecideError, Engine, Policy, RequestInfo};

use crate::{DecideHere, now};

const ONE: &str = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"2/h\"\nburst = 2\n";
const TWO: &str = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"2/h\"\nburst = 2\n\
                   [[limits]]\nname = \"b\"\nkey = \"global\"\nrate = \"5/h\"\nburst = 5\n";
const MATCHED: &str = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"2/h\"\nburst = 2\n\
                       match.path = \"/export\"\n";

fn decide(
    engine: &Engine,
    path: &str,
    at_once: bool,
) -> Result<sluice_policy::Verdict, DecideError> {
    let headers = HeaderMap::new();
    let req = RequestInfo {
        method: &Method::GET,
        path,
        headers: &headers,
        peer: Some("192.0.2.7".parse().unwrap()),
        cost: None,
        body: None,
    };
    if at_once {
        engine.decide_here(&req)
    } else {
        now(engine.decide(&req))
    }
}

#[test]
fn a_path_with_no_canonical_form_is_refused_on_every_path() {
    for toml in [ONE, TWO, MATCHED] {
        for at_once in [true, false] {
            let engine = Engine::new(Policy::from_toml("paths.toml", toml).unwrap());
            for bad in ["/a/../..", "/a%2Fb", "export"] {
                let e = decide(&engine, bad, at_once).unwrap_err();
                assert!(matches!(e, DecideError::Path(_)), "{toml} {bad}: {e}");
            }
            // Nothing was charged: the burst of 2 is whole.
            for _ in 0..2 {
                let v = decide(&engine, "/export", at_once).unwrap();
                assert!(v.allowed, "{toml}");
            }
            let v = decide(&engine, "/.//export", at_once).unwrap();
            assert!(!v.allowed, "{toml}: a spelling of /export is /export's");
        }
    }
}
