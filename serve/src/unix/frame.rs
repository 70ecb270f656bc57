//! Just enough of HTTP/2 framing (RFC 9113 §4, §6.2, §6.10) to find header blocks in a client's
//! byte stream and to write new HEADERS and CONTINUATION frames.

/// What every HTTP/2 client sends first.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of a frame header: 24-bit length, type, flags, 31-bit stream id.
pub const HEAD_LEN: usize = 9;
pub const HEADERS: u8 = 0x1;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;
/// The smallest SETTINGS_MAX_FRAME_SIZE a server may announce, so a frame of this size or less is
/// accepted by every server: written frames are split to it.
pub const SAFE_FRAME: usize = 16_384;

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    /// Reads the header at the start of `b`, which holds at least [`HEAD_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Head {
        Head {
            len: usize::from(b[0]) << 16 | usize::from(b[1]) << 8 | usize::from(b[2]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// Appends this header to `out`; `len` must fit in 24 bits.
    pub fn write(&self, out: &mut Vec<u8>) {
        debug_assert!(self.len < 1 << 24);
        out.extend_from_slice(&(self.len as u32).to_be_bytes()[1..]);
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
    }
}

/// A HEADERS frame's payload without its padding: the priority fields (when flagged) and the
/// header block fragment. `None` when the padding is longer than the payload allows (a
/// PROTOCOL_ERROR the server reports itself).
pub fn headers_payload(flags: u8, payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut body = payload;
    if flags & PADDED != 0 {
        let (&pad, rest) = body.split_first()?;
        body = rest.get(..rest.len().checked_sub(usize::from(pad))?)?;
    }
    if flags & PRIORITY != 0 {
        return (body.len() >= 5).then(|| body.split_at(5));
    }
    Some((&[], body))
}

/// Appends a header block as one HEADERS frame (with `priority`, `end_stream`) and as many
/// CONTINUATION frames as [`SAFE_FRAME`] needs; the last carries END_HEADERS. Never padded.
pub fn write_headers(out: &mut Vec<u8>, stream: u32, end_stream: bool, priority: &[u8], block: &[u8]) {
    let first = block.len().min(SAFE_FRAME - priority.len());
    let (head, mut rest) = block.split_at(first);
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if !priority.is_empty() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    Head { len: priority.len() + head.len(), kind: HEADERS, flags, stream }.write(out);
    out.extend_from_slice(priority);
    out.extend_from_slice(head);
    while !rest.is_empty() {
        let (part, after) = rest.split_at(rest.len().min(SAFE_FRAME));
        let flags = if after.is_empty() { END_HEADERS } else { 0 };
        Head { len: part.len(), kind: CONTINUATION, flags, stream }.write(out);
        out.extend_from_slice(part);
        rest = after;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn heads_round_trip() {
        let h = Head { len: 0x01_02_03, kind: HEADERS, flags: END_HEADERS | PRIORITY, stream: 0x7fff_fffe };
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(out.len(), HEAD_LEN);
        assert_eq!(Head::parse(&out), h);
        // The reserved bit of the stream id is ignored on read.
        out[5] |= 0x80;
        assert_eq!(Head::parse(&out).stream, 0x7fff_fffe);
    }

    #[test]
    fn padding_and_priority_are_taken_off() {
        assert_eq!(headers_payload(0, b"abc"), Some((&b""[..], &b"abc"[..])));
        assert_eq!(headers_payload(PADDED, b"\x02abcXY"), Some((&b""[..], &b"abc"[..])));
        assert_eq!(headers_payload(PRIORITY, b"12345abc"), Some((&b"12345"[..], &b"abc"[..])));
        assert_eq!(headers_payload(PADDED | PRIORITY, b"\x0112345abcZ"), Some((&b"12345"[..], &b"abc"[..])));
        // Padding longer than the payload, or no room for the priority fields, is malformed.
        assert_eq!(headers_payload(PADDED, b"\x05ab"), None);
        assert_eq!(headers_payload(PADDED, b""), None);
        assert_eq!(headers_payload(PRIORITY, b"1234"), None);
    }

    #[test]
    fn long_blocks_are_split_into_continuations() {
        let block = vec![7u8; SAFE_FRAME * 2 + 10];
        let mut out = Vec::new();
        write_headers(&mut out, 3, true, b"12345", &block);
        let mut at = 0;
        let mut frames = Vec::new();
        while at < out.len() {
            let h = Head::parse(&out[at..]);
            assert!(h.len <= SAFE_FRAME, "{h:?}");
            frames.push(h);
            at += HEAD_LEN + h.len;
        }
        assert_eq!(at, out.len());
        assert_eq!(frames.len(), 3);
        assert_eq!((frames[0].kind, frames[0].flags), (HEADERS, END_STREAM | PRIORITY));
        assert_eq!((frames[1].kind, frames[1].flags), (CONTINUATION, 0));
        assert_eq!((frames[2].kind, frames[2].flags), (CONTINUATION, END_HEADERS));
        assert_eq!(frames.iter().map(|f| f.len).sum::<usize>(), block.len() + 5);
        assert!(frames.iter().all(|f| f.stream == 3));
    }

    #[test]
    fn a_short_block_is_one_frame() {
        let mut out = Vec::new();
        write_headers(&mut out, 1, false, &[], b"abc");
        assert_eq!(Head::parse(&out), Head { len: 3, kind: HEADERS, flags: END_HEADERS, stream: 1 });
        assert_eq!(&out[HEAD_LEN..], b"abc");
    }
}
