//! Small integer helpers shared by the algorithms.
//!
//! The algorithms compute in `u128` so that nothing can overflow, but almost
//! every value fits in 64 bits, where division is several times cheaper than
//! the 128-bit library routine; and the divisor is often 1 (any rate whose
//! emission interval is a whole number of nanoseconds). Both cases take a
//! fast path.

/// `ceil(a / b)` for `b > 0`, saturating into a `u64`.
#[inline]
pub(crate) fn ceil_div(a: u128, b: u128) -> u64 {
    debug_assert!(b > 0);
    if b == 1 {
        return u64::try_from(a).unwrap_or(u64::MAX);
    }
    if let (Ok(a), Ok(b)) = (u64::try_from(a), u64::try_from(b)) {
        return a.div_ceil(b);
    }
    u64::try_from(a.div_ceil(b)).unwrap_or(u64::MAX)
}

/// `floor(a / b)` for `b > 0`, saturating into a `u64`.
#[inline]
pub(crate) fn floor_div(a: u128, b: u128) -> u64 {
    debug_assert!(b > 0);
    if b == 1 {
        return u64::try_from(a).unwrap_or(u64::MAX);
    }
    if let (Ok(a), Ok(b)) = (u64::try_from(a), u64::try_from(b)) {
        return a / b;
    }
    u64::try_from(a / b).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_and_slow_paths_agree() {
        let big = u128::from(u64::MAX) * 3 + 7;
        for (a, b) in [
            (0, 1),
            (7, 1),
            (7, 2),
            (8, 2),
            (big, 1),
            (big, 5),
            (big, big),
            (5, big),
        ] {
            assert_eq!(
                u128::from(ceil_div(a, b)),
                a.div_ceil(b).min(u128::from(u64::MAX))
            );
            assert_eq!(
                u128::from(floor_div(a, b)),
                (a / b).min(u128::from(u64::MAX))
            );
        }
    }
}
