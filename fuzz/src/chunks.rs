//! A fuzz input read as: a size limit, where to cut, and the stream itself.
//!
//! Layout (missing bytes read as zero):
//!
//! | bytes | meaning |
//! | --- | --- |
//! | 0..2 | `limit = 16 + (u16 little-endian % 4081)`, so 16..=4096 |
//! | 2 | mode: bit 7 set → one byte per chunk; else the low 5 bits are `n`, the number of cuts; bits 5 and 6 are `flags`, for the target to use |
//! | next `2n` | the cut positions, u16 little-endian each, taken modulo `stream.len() + 1` |
//! | the rest | the stream |
//!
//! Cuts are sorted, and may repeat (an empty chunk is pushed then) or fall
//! at 0 or at the end.

/// The smallest limit a target uses.
pub const MIN_LIMIT: usize = 16;
/// The largest small limit a target uses.
pub const MAX_LIMIT: usize = 4096;

/// A decoded fuzz input.
#[derive(Debug)]
pub struct Plan<'a> {
    /// The fuzzer's small size limit, 16..=4096.
    pub limit: usize,
    /// Byte-by-byte chunking.
    pub bytewise: bool,
    /// Two bits (0..=3) a target may use to pick a variant.
    pub flags: u8,
    /// Cut positions into `stream`, sorted, each `<= stream.len()`.
    pub cuts: Vec<usize>,
    /// The stream's bytes.
    pub stream: &'a [u8],
}

impl<'a> Plan<'a> {
    /// Reads `data` as described in the module docs.
    pub fn parse(data: &'a [u8]) -> Plan<'a> {
        let byte = |i: usize| data.get(i).copied().unwrap_or(0);
        let raw = u16::from_le_bytes([byte(0), byte(1)]);
        let limit = MIN_LIMIT + usize::from(raw) % (MAX_LIMIT - MIN_LIMIT + 1);
        let mode = byte(2);
        let bytewise = mode & 0x80 != 0;
        let flags = (mode >> 5) & 0b11;
        let n = if bytewise {
            0
        } else {
            usize::from(mode & 0x1f)
        };
        let header = (3 + 2 * n).min(data.len());
        let stream = &data[header..];
        let mut cuts: Vec<usize> = data[3.min(data.len())..header]
            .chunks(2)
            .map(|pair| {
                let raw = u16::from_le_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
                usize::from(raw) % (stream.len() + 1)
            })
            .collect();
        cuts.sort_unstable();
        Plan {
            limit,
            bytewise,
            flags,
            cuts,
            stream,
        }
    }

    /// The chunks to push, in order; together they are exactly `stream`.
    pub fn chunks(&self) -> Vec<&'a [u8]> {
        if self.bytewise {
            return self.stream.chunks(1).collect();
        }
        let mut out = Vec::with_capacity(self.cuts.len() + 1);
        let mut start = 0;
        for &cut in &self.cuts {
            out.push(&self.stream[start..cut]);
            start = cut;
        }
        out.push(&self.stream[start..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_stream() {
        let data = b"\x00\x00\x02\x03\x00\x01\x00abcdef";
        let plan = Plan::parse(data);
        assert_eq!(plan.limit, 16);
        assert_eq!(plan.stream, b"abcdef");
        assert_eq!(plan.chunks(), [&b"a"[..], b"bc", b"def"]);
        let plan = Plan::parse(b"\xff\xff\xe0xyz");
        assert_eq!(plan.flags, 3);
        assert_eq!(plan.chunks(), [&b"x"[..], b"y", b"z"]);
        assert!(Plan::parse(b"").chunks().concat().is_empty());
        assert!(Plan::parse(b"\x00\x00\x1f\x01").stream.is_empty());
    }
}
