//! Message payloads and the [`ByteSize`] trait the mailbox uses to account for bytes.

/// The most bytes an inline [`SmallPayload`] holds.
pub const INLINE_CAPACITY: usize = 64;

/// What a message costs against a mailbox's byte budget.
///
/// A size of zero takes the mailbox's fast path: no slab slot, no lock, no
/// allocation.
pub trait ByteSize {
    /// The bytes this message holds, as charged against the byte budget.
    fn byte_size(&self) -> usize;
}

/// A message payload that avoids allocation when it can.
///
/// * `Empty`: no bytes at all; the mailbox admits it on the fast path.
/// * `Inline`: up to [`INLINE_CAPACITY`] bytes copied into a 64-byte buffer held in the
///   value itself: no heap allocation per message.
/// * `Heap`: anything larger, in one boxed slice.
#[derive(Clone, PartialEq, Eq)]
pub enum SmallPayload {
    /// No bytes.
    Empty,
    /// At most [`INLINE_CAPACITY`] bytes, stored in place.
    Inline(InlineBytes),
    /// More than [`INLINE_CAPACITY`] bytes, on the heap.
    Heap(Box<[u8]>),
}

/// Up to [`INLINE_CAPACITY`] bytes in a fixed buffer.
///
/// Aligned to 8 (the value is 72 bytes, a [`SmallPayload`] 80): every move of a message then
/// copies its variant's tag as a word and the rest in aligned pieces. Byte-aligned, the tag
/// and the length sat in the first two bytes and each move shuffled the rest as pieces of
/// 1 to 16 bytes at odd offsets; a round trip through the mailbox took about 7 % longer
/// (`docs/results/2026-12-06-mailbox-closing-and-send-path.md`, "Fewer moves, and the harness").
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(align(8))]
pub struct InlineBytes {
    /// Invariant: `len as usize <= INLINE_CAPACITY`; bytes past `len` are zero.
    len: u8,
    buf: [u8; INLINE_CAPACITY],
}

impl InlineBytes {
    /// Copies `bytes` into a new inline buffer, or returns `None` when they do not fit.
    #[inline]
    pub fn new(bytes: &[u8]) -> Option<Self> {
        if bytes.len() > INLINE_CAPACITY {
            return None;
        }
        let mut buf = [0u8; INLINE_CAPACITY];
        buf[..bytes.len()].copy_from_slice(bytes);
        Some(Self {
            len: bytes.len() as u8,
            buf,
        })
    }

    /// The stored bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
}

impl SmallPayload {
    /// Copies `bytes` into the cheapest representation: `Empty` for none, `Inline` up to
    /// [`INLINE_CAPACITY`], `Heap` beyond.
    #[inline]
    pub fn copy_from(bytes: &[u8]) -> Self {
        if bytes.is_empty() {
            SmallPayload::Empty
        } else if let Some(inline) = InlineBytes::new(bytes) {
            SmallPayload::Inline(inline)
        } else {
            SmallPayload::Heap(bytes.into())
        }
    }

    /// The payload's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            SmallPayload::Empty => &[],
            SmallPayload::Inline(b) => b.as_slice(),
            SmallPayload::Heap(b) => b,
        }
    }

    /// How many bytes the payload holds.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            SmallPayload::Empty => 0,
            SmallPayload::Inline(b) => b.len as usize,
            SmallPayload::Heap(b) => b.len(),
        }
    }

    /// Whether the payload holds no bytes (only `Empty` does: the constructors never
    /// build an empty `Inline` or `Heap`).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for SmallPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            SmallPayload::Empty => "Empty",
            SmallPayload::Inline(_) => "Inline",
            SmallPayload::Heap(_) => "Heap",
        };
        write!(f, "SmallPayload::{kind}({} bytes)", self.len())
    }
}

impl ByteSize for SmallPayload {
    #[inline]
    fn byte_size(&self) -> usize {
        self.len()
    }
}

impl ByteSize for () {
    #[inline]
    fn byte_size(&self) -> usize {
        0
    }
}

impl ByteSize for Vec<u8> {
    #[inline]
    fn byte_size(&self) -> usize {
        self.len()
    }
}

impl ByteSize for String {
    #[inline]
    fn byte_size(&self) -> usize {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_from_picks_the_cheapest_representation() {
        assert!(matches!(SmallPayload::copy_from(&[]), SmallPayload::Empty));
        assert!(matches!(
            SmallPayload::copy_from(&[1]),
            SmallPayload::Inline(_)
        ));
        assert!(matches!(
            SmallPayload::copy_from(&[7; 64]),
            SmallPayload::Inline(_)
        ));
        assert!(matches!(
            SmallPayload::copy_from(&[7; 65]),
            SmallPayload::Heap(_)
        ));
        for n in [0, 1, 63, 64, 65, 1000] {
            let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let p = SmallPayload::copy_from(&bytes);
            assert_eq!(p.as_slice(), &bytes[..]);
            assert_eq!(p.byte_size(), n);
        }
    }
}
