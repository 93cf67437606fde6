//! Timestamps: nginx's `$time_local`, RFC 3339 and epoch numbers, to Unix
//! nanoseconds and back.

use sluice_core::Nanos;
use sluice_core::clock::SECOND;

/// Days from 1970-01-01 to the given proleptic Gregorian date (negative
/// before 1970).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Count from a year starting in March, so that the leap day is last.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400; // 0..=399
    let m = i64::from(month);
    let month_from_march = if m > 2 { m - 3 } else { m + 9 }; // 0..=11
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1; // 0..=365
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month, day) of a day counted from 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097; // 0..=146096
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153; // 0..=11, from March
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
            if leap { 29 } else { 28 }
        }
    }
}

/// `n` ASCII digits at the start of `b`, as a number.
fn digits(b: &[u8], n: usize) -> Option<u32> {
    let d = b.get(..n)?;
    let mut v = 0u32;
    for &c in d {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
    }
    Some(v)
}

/// Seconds since the epoch to Unix nanoseconds; `None` before 1970 or past
/// the year 2554.
fn to_nanos(secs: i64, frac_nanos: u64) -> Option<Nanos> {
    let secs = u64::try_from(secs).ok()?;
    secs.checked_mul(SECOND)?.checked_add(frac_nanos)
}

/// Parses nginx's `$time_local` (`10/Oct/2000:13:55:36 -0700`), remembering
/// the last date and zone seen so that a line of the same day costs a few
/// digit reads.
#[derive(Debug, Clone, Default)]
pub struct NginxTime {
    /// The `10/Oct/2000` and `-0700` of the last line, and the Unix seconds
    /// of that day's local midnight.
    cached: Option<([u8; 11], [u8; 5], i64)>,
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

impl NginxTime {
    /// A parser with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Unix nanoseconds of `10/Oct/2000:13:55:36 -0700` (exactly 26 bytes).
    pub fn parse(&mut self, s: &[u8]) -> Option<Nanos> {
        if s.len() != 26 || s[11] != b':' || s[14] != b':' || s[17] != b':' || s[20] != b' ' {
            return None;
        }
        let (date, tz) = (&s[..11], &s[21..26]);
        let hour = digits(&s[12..], 2)?;
        let minute = digits(&s[15..], 2)?;
        let second = digits(&s[18..], 2)?;
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        let midnight = match &self.cached {
            Some((d, z, m)) if d == date && z == tz => *m,
            _ => {
                let m = Self::midnight(date, tz)?;
                let mut d = [0u8; 11];
                d.copy_from_slice(date);
                let mut z = [0u8; 5];
                z.copy_from_slice(tz);
                self.cached = Some((d, z, m));
                m
            }
        };
        let secs = midnight + i64::from(hour * 3600 + minute * 60 + second);
        to_nanos(secs, 0)
    }

    /// Unix seconds of local midnight of `10/Oct/2000` in zone `-0700`.
    fn midnight(date: &[u8], tz: &[u8]) -> Option<i64> {
        if date[2] != b'/' || date[6] != b'/' {
            return None;
        }
        let day = digits(date, 2)?;
        let month = MONTHS.iter().position(|m| &date[3..6] == *m)?;
        let month = u32::try_from(month).ok()? + 1;
        let year = i64::from(digits(&date[7..], 4)?);
        if day == 0 || day > days_in_month(year, month) {
            return None;
        }
        let offset = zone_offset(tz)?;
        Some(days_from_civil(year, month, day) * 86_400 - offset)
    }
}

/// `+0200`/`-0700` as seconds east of UTC.
fn zone_offset(tz: &[u8]) -> Option<i64> {
    let sign = match tz.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let h = digits(&tz[1..], 2)?;
    let m = digits(&tz[3..], 2)?;
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * i64::from(h * 3600 + m * 60))
}

/// Parses an RFC 3339 timestamp (`2026-11-30T03:11:35.25Z`,
/// `2026-11-30 04:11:35+01:00`) to Unix nanoseconds.
pub fn parse_rfc3339(s: &str) -> Option<Nanos> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = i64::from(digits(b, 4)?);
    let month = digits(&b[5..], 2)?;
    let day = digits(&b[8..], 2)?;
    let hour = digits(&b[11..], 2)?;
    let minute = digits(&b[14..], 2)?;
    let second = digits(&b[17..], 2)?;
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut frac: u64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        let mut scale = 100_000_000u64;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            frac += u64::from(c - b'0') * scale;
            scale /= 10;
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => zone_offset(&[*sign, *h1, *h2, *m1, *m2])?,
        _ => return None,
    };
    let secs = days_from_civil(year, month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second)
        - offset;
    to_nanos(secs, frac)
}

/// An epoch number to Unix nanoseconds: seconds below 10^11 (which may have
/// a fraction), milliseconds below 10^14, microseconds below 10^17, else
/// nanoseconds.
pub fn from_epoch_f64(v: f64) -> Option<Nanos> {
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let nanos = if v < 1e11 {
        v * 1e9
    } else if v < 1e14 {
        v * 1e6
    } else if v < 1e17 {
        v * 1e3
    } else {
        v
    };
    if nanos >= 1.8e19 {
        return None;
    }
    // In range by the check above.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Some(nanos.round() as u64)
}

/// An integer epoch number to Unix nanoseconds, with the units of
/// [`from_epoch_f64`].
pub fn from_epoch_u64(v: u64) -> Option<Nanos> {
    if v < 100_000_000_000 {
        v.checked_mul(SECOND)
    } else if v < 100_000_000_000_000 {
        v.checked_mul(1_000_000)
    } else if v < 100_000_000_000_000_000 {
        v.checked_mul(1_000)
    } else {
        Some(v)
    }
}

/// Unix seconds as `2026-11-30T03:11:00Z`.
pub fn format_rfc3339(unix_secs: u64) -> String {
    let secs = i64::try_from(unix_secs).unwrap_or(i64::MAX);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trips() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for days in [-1000, -1, 0, 59, 60, 11_016, 11_017, 20_000, 30_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn nginx_time_matches_the_documented_example() {
        let mut t = NginxTime::new();
        // 2000-10-10T20:55:36Z
        assert_eq!(
            t.parse(b"10/Oct/2000:13:55:36 -0700"),
            Some(971_211_336 * SECOND)
        );
        // Same day from the cache, one second later.
        assert_eq!(
            t.parse(b"10/Oct/2000:13:55:37 -0700"),
            Some(971_211_337 * SECOND)
        );
        assert_eq!(
            t.parse(b"10/Oct/2000:20:55:36 +0000"),
            Some(971_211_336 * SECOND)
        );
        assert_eq!(
            t.parse(b"29/Feb/2024:00:00:00 +0000"),
            Some(1_709_164_800 * SECOND)
        );
        for bad in [
            &b"10/Oct/2000:13:55:36"[..],
            b"10/Foo/2000:13:55:36 -0700",
            b"31/Nov/2000:13:55:36 -0700",
            b"29/Feb/2023:13:55:36 -0700",
            b"10/Oct/2000:25:55:36 -0700",
            b"10/Oct/2000:13:55:36 07000",
            b"1x/Oct/2000:13:55:36 -0700",
        ] {
            assert_eq!(t.parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rfc3339_forms() {
        let base = 971_211_336 * SECOND;
        assert_eq!(parse_rfc3339("2000-10-10T20:55:36Z"), Some(base));
        assert_eq!(
            parse_rfc3339("2000-10-10T13:55:36.25-07:00"),
            Some(base + SECOND / 4)
        );
        assert_eq!(
            parse_rfc3339("2000-10-10 20:55:36.123456789z"),
            Some(base + 123_456_789)
        );
        for bad in [
            "2000-10-10T20:55:36",
            "2000-13-10T20:55:36Z",
            "2000-10-10T20:55:36.Z",
            "2000-10-10T20:55:36+0700",
            "1969-12-31T23:59:59Z",
            "not a time at all, really",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn epoch_units() {
        assert_eq!(from_epoch_u64(971_211_336), Some(971_211_336 * SECOND));
        assert_eq!(
            from_epoch_u64(971_211_336_250),
            Some(971_211_336_250_000_000)
        );
        assert_eq!(from_epoch_f64(971_211_336.5), Some(971_211_336_500_000_000));
        assert_eq!(from_epoch_f64(-1.0), None);
        assert_eq!(format_rfc3339(971_211_336), "2000-10-10T20:55:36Z");
    }
}
