//! Rates as people write them: `10/s`, `100/min`, `5000/h`, `1000/day`,
//! `50 per 10s`.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::clock::{Nanos, SECOND};
use crate::stack_text::StackText;

/// A long-run rate: `amount` units of cost per `period` nanoseconds.
///
/// ```
/// use sluice_core::Rate;
/// let r: Rate = "50 per 10s".parse().unwrap();
/// assert_eq!(r, Rate::new(50, 10_000_000_000).unwrap());
/// assert_eq!("100/min".parse::<Rate>().unwrap().to_string(), "100/min");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u64,
    period: Nanos,
}

/// Why a rate could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RateParseError {
    /// The text has no `/` or ` per `.
    #[error("expected a rate such as `10/s`, `100/min` or `50 per 10s`")]
    Syntax,
    /// The amount is not a whole number.
    #[error("the amount `{0}` is not a whole number")]
    Amount(String),
    /// The amount is zero.
    #[error("the amount must be at least 1")]
    ZeroAmount,
    /// The period's unit is unknown.
    #[error("unknown time unit `{0}` (use ms, s, min, h, day or week)")]
    Unit(String),
    /// The period's multiplier is not a whole number, or is zero.
    #[error("the period `{0}` must be a whole, positive number of units")]
    Period(String),
    /// The period overflows 64-bit nanoseconds.
    #[error("the period is too long")]
    TooLong,
}

impl Rate {
    /// `amount` per `period` nanoseconds; `None` if either is zero.
    pub const fn new(amount: u64, period: Nanos) -> Option<Self> {
        if amount == 0 || period == 0 {
            None
        } else {
            Some(Self { amount, period })
        }
    }

    /// `amount` per second. Panics if `amount` is zero (a programming error).
    pub const fn per_second(amount: u64) -> Self {
        match Self::new(amount, SECOND) {
            Some(rate) => rate,
            None => panic!("a rate needs an amount of at least 1"),
        }
    }

    /// `amount` per minute. Panics if `amount` is zero (a programming error).
    pub const fn per_minute(amount: u64) -> Self {
        match Self::new(amount, 60 * SECOND) {
            Some(rate) => rate,
            None => panic!("a rate needs an amount of at least 1"),
        }
    }

    /// Units of cost per period.
    pub const fn amount(&self) -> u64 {
        self.amount
    }

    /// The period in nanoseconds.
    pub const fn period(&self) -> Nanos {
        self.period
    }

    /// The rate in words, as an operator configures it: its amount per its
    /// period in the largest whole unit, for messages to people.
    ///
    /// ```
    /// use sluice_core::Rate;
    /// assert_eq!(Rate::per_second(10).in_words(), "10 per second");
    /// assert_eq!(Rate::per_minute(600).in_words(), "600 per minute");
    /// assert_eq!(Rate::new(5, 2_000_000_000).unwrap().in_words(), "5 per 2 seconds");
    /// assert_eq!(Rate::new(1, 1_500_000_000).unwrap().in_words(), "1 per 1500 milliseconds");
    /// ```
    pub fn in_words(&self) -> String {
        let (n, _, unit) = largest_unit(self.period);
        match n {
            1 => format!("{} per {unit}", self.amount),
            n => format!("{} per {n} {unit}s", self.amount),
        }
    }

    /// The time this rate takes to refill `cost` units, rounded up (and
    /// `Nanos::MAX` where that does not fit).
    ///
    /// ```
    /// use sluice_core::Rate;
    /// assert_eq!(Rate::per_second(3).refill_time(1), 333_333_334);
    /// assert_eq!(Rate::per_second(3).refill_time(3), 1_000_000_000);
    /// ```
    pub fn refill_time(&self, cost: u64) -> Nanos {
        let t = (u128::from(cost) * u128::from(self.period)).div_ceil(u128::from(self.amount));
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// The same rate as a reduced fraction `(amount, period)`: the emission
    /// interval is exactly `period / amount` nanoseconds.
    pub(crate) fn reduced(&self) -> (u64, u64) {
        let g = gcd(self.amount, self.period);
        (self.amount / g, self.period / g)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

const UNITS: &[(&[&str], Nanos)] = &[
    (&["ns", "nanosecond", "nanoseconds"], 1),
    (&["us", "microsecond", "microseconds"], 1_000),
    (&["ms", "millisecond", "milliseconds"], 1_000_000),
    (&["s", "sec", "secs", "second", "seconds"], SECOND),
    (&["m", "min", "mins", "minute", "minutes"], 60 * SECOND),
    (&["h", "hr", "hrs", "hour", "hours"], 3_600 * SECOND),
    (&["d", "day", "days"], 86_400 * SECOND),
    (&["w", "week", "weeks"], 604_800 * SECOND),
];

fn parse_period(text: &str) -> Result<Nanos, RateParseError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    let multiplier = if number.is_empty() {
        1
    } else {
        number
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| RateParseError::Period(text.to_owned()))?
    };
    let base = UNITS
        .iter()
        .find(|(names, _)| names.iter().any(|n| n.eq_ignore_ascii_case(unit)))
        .map(|(_, ns)| *ns)
        .ok_or_else(|| RateParseError::Unit(unit.to_owned()))?;
    multiplier.checked_mul(base).ok_or(RateParseError::TooLong)
}

/// Parses a duration written like a rate's period: a number and a unit,
/// e.g. `10ms`, `2s`, `1 min`. The number is required.
///
/// ```
/// assert_eq!(sluice_core::parse_duration("10ms"), Ok(10_000_000));
/// assert!(sluice_core::parse_duration("ms").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, RateParseError> {
    let t = text.trim();
    if !t.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(RateParseError::Period(t.to_owned()));
    }
    parse_period(t)
}

impl FromStr for Rate {
    type Err = RateParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (amount, period) = if let Some((a, p)) = s.split_once('/') {
            (a, p)
        } else if let Some((a, p)) = s.split_once(" per ") {
            (a, p)
        } else {
            return Err(RateParseError::Syntax);
        };
        let amount = amount.trim().replace('_', "");
        let amount: u64 = amount
            .parse()
            .map_err(|_| RateParseError::Amount(amount.clone()))?;
        if amount == 0 {
            return Err(RateParseError::ZeroAmount);
        }
        let period = parse_period(period)?;
        Ok(Self { amount, period })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text().as_str())
    }
}

impl Rate {
    /// The rate as written in configs (`100/min`, `50 per 10s`), made on
    /// the stack: what [`Display`](fmt::Display) writes and a serializer
    /// takes as one string (JSON answers carry a limit's rate on every
    /// decision).
    fn text(&self) -> StackText<64> {
        // At most 20 digits, ` per `, 20 digits and a unit: it fits
        // (`the_longest_text_fits`).
        let mut text = StackText::new();
        let (n, unit, _) = largest_unit(self.period);
        let _ = text.push(itoa::Buffer::new().format(self.amount));
        if n == 1 {
            let _ = text.push("/");
        } else {
            let _ = text.push(" per ");
            let _ = text.push(itoa::Buffer::new().format(n));
        }
        let _ = text.push(unit);
        text
    }
}

/// A period in the largest unit that divides it: how many, the unit's
/// short name (`min`) and its word (`minute`).
fn largest_unit(period: Nanos) -> (Nanos, &'static str, &'static str) {
    const UNITS: &[(Nanos, &str, &str)] = &[
        (604_800 * SECOND, "week", "week"),
        (86_400 * SECOND, "day", "day"),
        (3_600 * SECOND, "h", "hour"),
        (60 * SECOND, "min", "minute"),
        (SECOND, "s", "second"),
        (1_000_000, "ms", "millisecond"),
        (1_000, "us", "microsecond"),
    ];
    UNITS
        .iter()
        .find(|(ns, _, _)| period.is_multiple_of(*ns))
        .map_or((period, "ns", "nanosecond"), |(ns, short, word)| {
            (period / ns, *short, *word)
        })
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.text().as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_common_forms() {
        let cases = [
            ("10/s", 10, SECOND),
            ("100/min", 100, 60 * SECOND),
            ("5000/h", 5000, 3600 * SECOND),
            ("1000/day", 1000, 86_400 * SECOND),
            ("50 per 10s", 50, 10 * SECOND),
            ("50/10s", 50, 10 * SECOND),
            ("1 per 2 minutes", 1, 120 * SECOND),
            ("1_000_000/s", 1_000_000, SECOND),
            (" 7 / 250ms ", 7, 250_000_000),
        ];
        for (text, amount, period) in cases {
            let rate: Rate = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((rate.amount(), rate.period()), (amount, period), "{text}");
        }
    }

    #[test]
    fn rejects_nonsense() {
        assert_eq!("10".parse::<Rate>(), Err(RateParseError::Syntax));
        assert_eq!("0/s".parse::<Rate>(), Err(RateParseError::ZeroAmount));
        assert_eq!(
            "10/fortnight".parse::<Rate>(),
            Err(RateParseError::Unit("fortnight".into()))
        );
        assert!(matches!(
            "x/s".parse::<Rate>(),
            Err(RateParseError::Amount(_))
        ));
        assert!(matches!(
            "1 per 0s".parse::<Rate>(),
            Err(RateParseError::Period(_))
        ));
        assert_eq!(
            "1 per 99999999999week".parse::<Rate>(),
            Err(RateParseError::TooLong)
        );
    }

    #[test]
    fn displays_round_trip() {
        for text in ["10/s", "100/min", "50 per 10s", "3/day", "7 per 250ms"] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!(rate.to_string().parse::<Rate>().unwrap(), rate);
        }
    }

    proptest::proptest! {
        /// The text made on the stack is the one `format!` makes, for every
        /// amount and period, the longest included.
        #[test]
        fn the_text_is_the_formatted_one(amount in 1..=u64::MAX, period in 1..=u64::MAX) {
            let rate = Rate::new(amount, period).unwrap();
            let expected = match largest_unit(period) {
                (1, unit, _) => format!("{amount}/{unit}"),
                (n, unit, _) => format!("{amount} per {n}{unit}"),
            };
            proptest::prop_assert_eq!(rate.to_string(), expected);
        }
    }

    #[test]
    fn the_longest_text_fits() {
        let rate = Rate::new(u64::MAX, u64::MAX).unwrap();
        assert_eq!(
            rate.to_string(),
            "18446744073709551615 per 18446744073709551615ns"
        );
    }

    #[test]
    fn reduces_to_an_exact_emission_interval() {
        assert_eq!(Rate::per_second(10).reduced(), (1, 100_000_000));
        assert_eq!(Rate::per_second(3).reduced(), (3, SECOND));
    }
}
