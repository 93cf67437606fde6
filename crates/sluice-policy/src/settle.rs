//! Loading a file only once it has stopped changing: a reload reads it,
//! waits [`SETTLE`], and reads it again; only when the two reads agree is
//! the text used, so a file caught in the middle of a write is never
//! loaded. The TOML config's reloader and the Envoy YAML reloader both
//! read this way.

use std::time::Duration;

/// How long a changed file must stay the same before it is loaded.
pub const SETTLE: Duration = Duration::from_millis(250);

/// How many times a forced reload (SIGHUP, `POST /admin/reload`) waits
/// [`SETTLE`] for a file that keeps changing before it gives up.
pub const SETTLE_TRIES: usize = 10;

/// What a settled read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled<T> {
    /// The same as the last load (and the reload was not forced), or still
    /// changing on a poll, which leaves it to the next one.
    Unchanged,
    /// Two reads agreed on this.
    Stable(T),
    /// A forced reload found it still changing after [`SETTLE_TRIES`]
    /// waits.
    StillChanging,
}

/// Reads with `read` until two reads [`SETTLE`] apart agree. Unless
/// `force`d, a first read equal to `last` is [`Settled::Unchanged`] at once,
/// and a file still changing after one wait is left to the next poll.
/// Blocks (sleeps) for at least [`SETTLE`] when something changed.
pub fn settled<T: PartialEq>(
    mut read: impl FnMut() -> T,
    last: Option<&T>,
    force: bool,
) -> Settled<T> {
    let mut text = read();
    if !force && last == Some(&text) {
        return Settled::Unchanged;
    }
    let mut tries = if force { SETTLE_TRIES } else { 1 };
    loop {
        std::thread::sleep(SETTLE);
        let again = read();
        if again == text {
            return Settled::Stable(text);
        }
        text = again;
        tries -= 1;
        if tries == 0 {
            return if force {
                Settled::StillChanging
            } else {
                Settled::Unchanged
            };
        }
    }
}

/// The message of [`Settled::StillChanging`].
pub fn still_changing_message() -> String {
    format!(
        "the files kept changing for {:?}; write configs by renaming a finished file over the old one",
        SETTLE * SETTLE_TRIES as u32
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_taken_once_two_reads_agree() {
        let mut reads = [1, 2, 2].into_iter();
        assert_eq!(
            settled(|| reads.next().unwrap_or(9), None, true),
            Settled::Stable(2)
        );
        assert_eq!(settled(|| 5, Some(&5), false), Settled::Unchanged);
        assert_eq!(settled(|| 5, Some(&5), true), Settled::Stable(5));
        // A poll leaves a changing file to the next poll.
        let mut n = 0;
        assert_eq!(
            settled(
                || {
                    n += 1;
                    n
                },
                None,
                false
            ),
            Settled::Unchanged
        );
    }
}
