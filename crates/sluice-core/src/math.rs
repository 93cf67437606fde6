//! Small integer helpers shared by the algorithms.

/// `ceil(a / b)` for `b > 0`, saturating into a `u64`.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u64 {
    debug_assert!(b > 0);
    let q = a.div_ceil(b);
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// `floor(a / b)` for `b > 0`, saturating into a `u64`.
#[inline]
pub(crate) fn floor_div(a: u128, b: u128) -> u64 {
    debug_assert!(b > 0);
    u64::try_from(a / b).unwrap_or(u64::MAX)
}
