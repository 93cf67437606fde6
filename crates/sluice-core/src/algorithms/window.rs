//! Window arithmetic shared by the fixed and sliding window counters.
//!
//! A window holds `burst` units and lasts `burst` emission intervals, i.e.
//! `burst * p / a` nanoseconds with the rate reduced to `a` per `p` ns.
//! Windows are aligned to multiples of their length since the clock's epoch
//! (the Unix epoch for the system clock). Times are scaled by `a` so that
//! window boundaries are exact.

use crate::clock::Nanos;
use crate::error::LimitError;
use crate::math::ceil_div;
use crate::rate::Rate;

/// The largest burst a window counter accepts (counts are 32-bit).
pub const MAX_WINDOW_BURST: u64 = u32::MAX as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Windows {
    /// Scale: scaled units per nanosecond.
    pub(crate) a: u64,
    /// Window length in scaled units.
    pub(crate) len: u128,
    /// Units admitted per window.
    pub(crate) burst: u64,
    /// Whether debt is forgiven at the end of the window (see
    /// [`carried`](Self::carried)); off by default.
    pub(crate) forgive: bool,
}

impl Windows {
    /// The rate, reduced: `a` per `len / burst` nanoseconds.
    pub(crate) fn reduced_rate(&self) -> (u64, u64) {
        let p = self.len / u128::from(self.burst);
        (self.a, u64::try_from(p).unwrap_or(u64::MAX))
    }

    pub(crate) fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        if burst == 0 {
            return Err(LimitError::ZeroBurst);
        }
        if burst > MAX_WINDOW_BURST {
            return Err(LimitError::BurstTooLarge {
                burst,
                max: MAX_WINDOW_BURST,
            });
        }
        let (a, p) = rate.reduced();
        let len = u128::from(burst) * u128::from(p);
        if len / u128::from(a) > u128::from(500 * 365 * 86_400 * crate::clock::SECOND) {
            return Err(LimitError::TooLong { burst });
        }
        Ok(Self {
            a,
            len,
            burst,
            forgive: false,
        })
    }

    /// What is left of `count` units, counted in one window, `windows`
    /// windows later: each window boundary pays off one burst, and the rest
    /// (debt) carries on. With debt forgiven, nothing carries. A count of
    /// at most one burst (no debt) is gone at the next boundary either way.
    #[inline]
    pub(crate) fn carried(&self, count: u64, windows: u64) -> u64 {
        if windows == 0 {
            count
        } else if self.forgive {
            0
        } else {
            count.saturating_sub(windows.saturating_mul(self.burst))
        }
    }

    /// The number of window boundaries until `count > 0` units counted in
    /// one window are gone: `ceil(count / burst)`, or 1 with debt forgiven.
    #[inline]
    pub(crate) fn boundaries_to_clear(&self, count: u64) -> u64 {
        if self.forgive {
            1
        } else {
            count.div_ceil(self.burst)
        }
    }

    /// The scaled start of the window `windows` after window `index`.
    #[inline]
    pub(crate) fn start_after(&self, index: u64, windows: u64) -> u128 {
        self.start(index)
            .saturating_add(u128::from(windows).saturating_mul(self.len))
    }

    /// `now` in scaled units.
    #[inline]
    pub(crate) fn scaled(&self, now: Nanos) -> u128 {
        u128::from(now) * u128::from(self.a)
    }

    /// The index of the window holding scaled time `t`.
    #[inline]
    pub(crate) fn index(&self, t: u128) -> u64 {
        u64::try_from(t / self.len).unwrap_or(u64::MAX)
    }

    /// The scaled start of window `index`.
    #[inline]
    pub(crate) fn start(&self, index: u64) -> u128 {
        u128::from(index) * self.len
    }

    /// Nanoseconds from scaled time `t` until scaled time `until`, rounded up.
    #[inline]
    pub(crate) fn until(&self, t: u128, until: u128) -> Nanos {
        ceil_div(until.saturating_sub(t), u128::from(self.a))
    }

    /// The nanosecond at which scaled time `t` is reached, rounded up.
    #[inline]
    pub(crate) fn at(&self, t: u128) -> Nanos {
        ceil_div(t, u128::from(self.a))
    }
}
