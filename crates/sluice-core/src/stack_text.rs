//! Short text written into a fixed buffer on the stack: for values made on
//! every request (a rate's text, a header field's value) that would
//! otherwise take an allocation or go through `core::fmt`.

/// Text of at most `N` bytes, on the stack.
///
/// ```
/// use sluice_core::StackText;
/// let mut text = StackText::<8>::new();
/// assert_eq!(text.push("10/"), Some(()));
/// assert_eq!(text.push("min"), Some(()));
/// assert_eq!(text.as_str(), "10/min");
/// // What does not fit is not written.
/// assert_eq!(text.push("ute"), None);
/// assert_eq!(text.as_bytes(), b"10/min");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct StackText<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    /// No text.
    pub const fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
        }
    }

    /// Appends `text`; `None`, and nothing written, when it does not fit.
    #[inline]
    pub fn push(&mut self, text: &str) -> Option<()> {
        let end = self.len.checked_add(text.len())?;
        self.bytes
            .get_mut(self.len..end)?
            .copy_from_slice(text.as_bytes());
        self.len = end;
        Some(())
    }

    /// The text's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only whole `str`s are pushed.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        Self::new()
    }
}
