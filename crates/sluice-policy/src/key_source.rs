//! Where a limit finds the key it counts by.

use std::fmt;
use std::str::FromStr;

use http::HeaderName;

/// The source of a limit's key.
///
/// Written in configs as `"ip"`, `"global"` or `"header:<Name>"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The client's IP address (see the trusted-proxy rules).
    Ip,
    /// One key shared by every request.
    Global,
    /// The value of a request header, such as `X-Api-Key`.
    Header(HeaderName),
}

impl FromStr for KeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ip" => Ok(Self::Ip),
            "global" => Ok(Self::Global),
            _ => match s.strip_prefix("header:") {
                Some(name) => HeaderName::from_bytes(name.trim().as_bytes())
                    .map(Self::Header)
                    .map_err(|_| format!("`{name}` is not a valid header name")),
                None => Err(format!(
                    "unknown key source `{s}`: expected \"ip\", \"global\" or \"header:<Name>\""
                )),
            },
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ip => f.write_str("ip"),
            Self::Global => f.write_str("global"),
            Self::Header(h) => write!(f, "header:{h}"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for KeySource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_forms() {
        assert_eq!("ip".parse(), Ok(KeySource::Ip));
        assert_eq!("global".parse(), Ok(KeySource::Global));
        assert_eq!(
            "header:X-Api-Key".parse::<KeySource>().unwrap().to_string(),
            "header:x-api-key"
        );
        assert!("header:bad name".parse::<KeySource>().is_err());
        assert!("cookie:x".parse::<KeySource>().is_err());
    }
}
