//! Where a limit finds the key it counts by.

use std::fmt;
use std::str::FromStr;

use http::HeaderName;

/// The source of a limit's key.
///
/// Written in configs as `"ip"`, `"global"`, `"header:<Name>"`,
/// `"bearer"`, or several of the last two joined by `|`
/// (`"bearer|header:X-Api-Key"`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The client's IP address (see the trusted-proxy rules).
    Ip,
    /// One key shared by every request.
    Global,
    /// The value of a request header, such as `X-Api-Key`.
    Header(HeaderName),
    /// The token of `Authorization: Bearer <token>` (RFC 6750).
    Bearer,
    /// Whichever of these (`bearer` and `header:` sources) the request
    /// has: a request giving two of them must give the same key, or it is
    /// ambiguous (an upstream could read the other).
    AnyOf(Box<[KeySource]>),
}

impl FromStr for KeySource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains('|') {
            let parts = s
                .split('|')
                .map(|p| match p.trim().parse::<Self>()? {
                    one @ (Self::Header(_) | Self::Bearer) => Ok(one),
                    other => Err(format!(
                        "`{other}` cannot be one of several key sources: join \"bearer\" and \"header:<Name>\" sources with `|`"
                    )),
                })
                .collect::<Result<Box<[Self]>, String>>()?;
            return Ok(Self::AnyOf(parts));
        }
        match s {
            "ip" => Ok(Self::Ip),
            "global" => Ok(Self::Global),
            "bearer" => Ok(Self::Bearer),
            _ => match s.strip_prefix("header:") {
                Some(name) => HeaderName::from_bytes(name.trim().as_bytes())
                    .map(Self::Header)
                    .map_err(|_| format!("`{name}` is not a valid header name")),
                None => Err(format!(
                    "unknown key source `{s}`: expected \"ip\", \"global\", \"bearer\" or \"header:<Name>\""
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
            Self::Bearer => f.write_str("bearer"),
            Self::AnyOf(all) => {
                for (i, one) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("|")?;
                    }
                    write!(f, "{one}")?;
                }
                Ok(())
            }
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
        assert_eq!("bearer".parse(), Ok(KeySource::Bearer));
        let either = "bearer | header:X-Api-Key".parse::<KeySource>().unwrap();
        assert_eq!(either.to_string(), "bearer|header:x-api-key");
        assert_eq!(either.to_string().parse(), Ok(either));
        assert!("bearer|ip".parse::<KeySource>().is_err());
        assert!("bearer|".parse::<KeySource>().is_err());
    }
}
