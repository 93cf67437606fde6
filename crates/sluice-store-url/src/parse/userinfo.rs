//! The user-info (`user[:password]@`): the credentials, percent-decoded,
//! with the password from the environment when the URL has none.

use crate::PASSWORD_ENV;
use crate::percent::percent_decode;

/// The credentials of a URL; an empty user name or password is none.
pub(super) struct Credentials {
    /// ACL user name, if any.
    pub(super) username: Option<String>,
    /// Password, if any (from the URL or the environment).
    pub(super) password: Option<String>,
}

/// Splits what follows `://` into the user-info (if any) and the rest.
///
/// The user-info ends at the last `@`, so that an unencoded `@` or `/`
/// in a password still parses (and is still redacted).
pub(super) fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

impl Credentials {
    /// The credentials of the user-info `user[:password]` (none without
    /// user-info), each percent-decoded: the user name first, then the
    /// password.
    pub(super) fn parse(userinfo: Option<&str>) -> Result<Self, String> {
        let Some(info) = userinfo else {
            return Ok(Self {
                username: None,
                password: None,
            });
        };
        let (user, pass) = match info.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (info, None),
        };
        let user = percent_decode(user).map_err(|e| format!("user name: {e}"))?;
        let pass = match pass {
            Some(p) => Some(decode_password(p)?),
            None => None,
        };
        Ok(Self {
            username: Some(user).filter(|u| !u.is_empty()),
            password: pass.filter(|p| !p.is_empty()),
        })
    }

    /// These credentials, with the password from [`PASSWORD_ENV`] (looked
    /// up only when the URL has none; an empty value is none).
    pub(super) fn or_env_password(self, env: &dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            username: self.username,
            password: self
                .password
                .or_else(|| env(PASSWORD_ENV).filter(|p| !p.is_empty())),
        }
    }
}

/// Percent-decodes a password; the error says how to encode one, never
/// what it was.
fn decode_password(p: &str) -> Result<String, String> {
    percent_decode(p).map_err(|_| {
        "the password is not validly percent-encoded (write `%40` for `@`, \
         `%25` for `%`)"
            .to_owned()
    })
}
