//! [`Filter`]: the client-to-server byte stream of one HTTP/2 connection, looked at until its
//! first header block and, only when that block's `:authority` would be refused, rewritten from
//! then on. Sans-IO, so every case is a unit test.
//!
//! Before the first complete header block, bytes are handed on as soon as whole frames (or the
//! preface) are seen; the block itself is held until it is decoded. Then:
//! - its `:authority` is accepted, or absent, or the block does not decode: the held bytes go on
//!   as they came and the filter steps aside ([`Filter::is_passthrough`]); the caller then reads
//!   the socket directly. kiln's own clients take this path. A malformed stream takes it too, so
//!   the server reports the error as it would without the filter.
//! - it would be refused: every header block of the connection is decoded (the client's dynamic
//!   table is kept) and written again with `:authority` replaced ([`super::hpack::encode`]), in
//!   HEADERS and CONTINUATION frames of at most [`frame::SAFE_FRAME`] bytes, padding dropped and
//!   priority fields kept. Every other frame goes on untouched, streamed rather than held.

use super::frame::{self, CONTINUATION, END_HEADERS, END_STREAM, HEAD_LEN, HEADERS, Head, PREFACE};
use super::hpack::{self, DecoderError};
use loona_hpack::Decoder;

/// Largest header block held, all its frames together. A larger one is handed on untouched
/// while looking (the server enforces its own header list limit) and ends a rewritten connection.
pub const MAX_BLOCK_BYTES: usize = 1 << 20;

/// Why a rewritten connection cannot go on; the caller closes it.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("HTTP/2 framing: {0}")]
    Framing(&'static str),
    #[error("HPACK: {0}")]
    Hpack(#[from] DecoderError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// This many bytes of the preface seen.
    Preface(usize),
    /// At a frame boundary.
    Frames,
    /// Inside a frame that goes on untouched: this many payload bytes still to come.
    Forward(usize),
    /// The filter has stepped aside: everything goes on untouched.
    Passthrough,
}

/// A header block being collected from HEADERS and its CONTINUATION frames.
#[derive(Debug)]
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Vec<u8>,
    fragment: Vec<u8>,
    /// The frames as they came, handed on unchanged when the block needs no rewrite.
    raw: Vec<u8>,
}

/// See the module documentation.
pub struct Filter {
    stage: Stage,
    /// Set once a block's `:authority` was refused: every block is rewritten from then on.
    rewriting: bool,
    decoder: Decoder<'static>,
    /// Input not yet handed on or consumed (a partial frame).
    pending: Vec<u8>,
    block: Option<Block>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("stage", &self.stage)
            .field("rewriting", &self.rewriting)
            .field("pending", &self.pending.len())
            .field("block", &self.block.as_ref().map(|b| b.fragment.len()))
            .finish()
    }
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            stage: Stage::Preface(0),
            rewriting: false,
            decoder: hpack::decoder(),
            pending: Vec::new(),
            block: None,
        }
    }
}

impl Filter {
    /// Whether the filter has stepped aside for good, with nothing held: the caller may read the
    /// socket directly from now on.
    pub fn is_passthrough(&self) -> bool {
        self.stage == Stage::Passthrough && self.pending.is_empty()
    }

    /// Whether the connection's header blocks are being rewritten.
    pub fn is_rewriting(&self) -> bool {
        self.rewriting
    }

    /// Takes bytes read from the client and appends what the server should read to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), FilterError> {
        if self.stage == Stage::Passthrough {
            out.extend_from_slice(input);
            return Ok(());
        }
        self.pending.extend_from_slice(input);
        let mut at = 0;
        let result = self.step(&mut at, out);
        self.pending.drain(..at);
        result
    }

    /// The client closed its side: whatever is held goes on (a truncated frame is the server's
    /// to report) and the filter steps aside.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some(block) = self.block.take() {
            out.extend_from_slice(&block.raw);
        }
        out.append(&mut self.pending);
        self.stage = Stage::Passthrough;
    }

    /// Consumes whole units of `self.pending` from `*at` on.
    fn step(&mut self, at: &mut usize, out: &mut Vec<u8>) -> Result<(), FilterError> {
        loop {
            let input = &self.pending[*at..];
            match self.stage {
                Stage::Passthrough => {
                    out.extend_from_slice(input);
                    *at = self.pending.len();
                    return Ok(());
                }
                Stage::Preface(seen) => {
                    let take = input.len().min(PREFACE.len() - seen);
                    if input[..take] != PREFACE[seen..seen + take] {
                        // Not HTTP/2 with prior knowledge: the server answers it as it would.
                        self.stage = Stage::Passthrough;
                        continue;
                    }
                    out.extend_from_slice(&input[..take]);
                    *at += take;
                    if seen + take < PREFACE.len() {
                        self.stage = Stage::Preface(seen + take);
                        return Ok(());
                    }
                    self.stage = Stage::Frames;
                }
                Stage::Forward(left) => {
                    let take = input.len().min(left);
                    out.extend_from_slice(&input[..take]);
                    *at += take;
                    if take < left {
                        self.stage = Stage::Forward(left - take);
                        return Ok(());
                    }
                    self.stage = Stage::Frames;
                }
                Stage::Frames => {
                    if input.len() < HEAD_LEN {
                        return Ok(());
                    }
                    let head = Head::parse(input);
                    let is_header_frame = head.kind == HEADERS || head.kind == CONTINUATION;
                    if !is_header_frame && self.block.is_none() {
                        out.extend_from_slice(&input[..HEAD_LEN]);
                        *at += HEAD_LEN;
                        self.stage = Stage::Forward(head.len);
                        continue;
                    }
                    if !is_header_frame {
                        return self.give_up(
                            at,
                            out,
                            FilterError::Framing("a header block interrupted by another frame"),
                        );
                    }
                    let held = self.block.as_ref().map_or(0, |b| b.raw.len());
                    if held + HEAD_LEN + head.len > MAX_BLOCK_BYTES {
                        return self.give_up(at, out, FilterError::Framing("a header block over 1 MiB"));
                    }
                    if input.len() < HEAD_LEN + head.len {
                        return Ok(());
                    }
                    let end = *at + HEAD_LEN + head.len;
                    let frame = self.pending[*at..end].to_vec();
                    if let Err(e) = self.collect(head, frame) {
                        // Handed on from its start when looking: the server reports it.
                        return self.give_up(at, out, e);
                    }
                    *at = end;
                    if head.flags & END_HEADERS != 0 {
                        self.finish_block(out)?;
                    }
                }
            }
        }
    }

    /// Adds one HEADERS or CONTINUATION frame to the block being collected.
    fn collect(&mut self, head: Head, frame: Vec<u8>) -> Result<(), FilterError> {
        let payload = &frame[HEAD_LEN..];
        match (head.kind, &mut self.block) {
            (HEADERS, None) => {
                let (priority, fragment) = frame::headers_payload(head.flags, payload)
                    .ok_or(FilterError::Framing("HEADERS padding or priority longer than the frame"))?;
                self.block = Some(Block {
                    stream: head.stream,
                    end_stream: head.flags & END_STREAM != 0,
                    priority: priority.to_vec(),
                    fragment: fragment.to_vec(),
                    raw: frame,
                });
                Ok(())
            }
            (CONTINUATION, Some(block)) if block.stream == head.stream => {
                block.fragment.extend_from_slice(payload);
                block.raw.extend_from_slice(&frame);
                Ok(())
            }
            _ => Err(FilterError::Framing("CONTINUATION without its HEADERS, or HEADERS inside a header block")),
        }
    }

    /// Decodes the collected block and decides (the first time) or rewrites (from then on).
    fn finish_block(&mut self, out: &mut Vec<u8>) -> Result<(), FilterError> {
        let Some(block) = self.block.take() else { return Ok(()) };
        if !self.rewriting && hpack::first_block_authority(&block.fragment) == Some(true) {
            // The usual case (kiln's own clients), decided without a full decode.
            out.extend_from_slice(&block.raw);
            self.stage = Stage::Passthrough;
            return Ok(());
        }
        let fields = match self.decoder.decode(&block.fragment) {
            Ok(fields) => fields,
            Err(e) if self.rewriting => return Err(e.into()),
            Err(_) => {
                // The server's own decoder refuses the same bytes, with the right error code.
                out.extend_from_slice(&block.raw);
                self.stage = Stage::Passthrough;
                return Ok(());
            }
        };
        if !self.rewriting && !hpack::has_refused_authority(&fields) {
            out.extend_from_slice(&block.raw);
            self.stage = Stage::Passthrough;
            return Ok(());
        }
        self.rewriting = true;
        frame::write_headers(out, block.stream, block.end_stream, &block.priority, &hpack::encode(&fields));
        Ok(())
    }

    /// A stream this filter cannot follow. While looking, everything goes on untouched and the
    /// server reports the error; once rewriting, the connection must end (the client's table
    /// and the server's no longer agree).
    fn give_up(&mut self, at: &mut usize, out: &mut Vec<u8>, why: FilterError) -> Result<(), FilterError> {
        if self.rewriting {
            return Err(why);
        }
        if let Some(block) = self.block.take() {
            out.extend_from_slice(&block.raw);
        }
        out.extend_from_slice(&self.pending[*at..]);
        *at = self.pending.len();
        self.stage = Stage::Passthrough;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::frame::{PADDED, PRIORITY, SAFE_FRAME};
    use super::super::hpack::tests::IndexingEncoder;
    use super::*;
    use proptest::prelude::*;

    const SETTINGS: &[u8] = &[0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0];
    const WINDOW_UPDATE: &[u8] = &[0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 1, 0, 0];

    fn fields(authority: &str, path: &str) -> Vec<hpack::Field> {
        [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", authority), ("te", "trailers")]
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    /// Frames of one request the way a gRPC client's encoder writes them (indexing).
    fn request(encoder: &mut IndexingEncoder, stream: u32, flags: u8, fields: &[hpack::Field]) -> Vec<u8> {
        let block = encoder.encode(fields);
        let mut out = Vec::new();
        let mut payload = Vec::new();
        if flags & PADDED != 0 {
            payload.push(3);
        }
        if flags & PRIORITY != 0 {
            payload.extend_from_slice(&[0, 0, 0, 0, 15]);
        }
        payload.extend_from_slice(&block);
        if flags & PADDED != 0 {
            payload.extend_from_slice(&[0, 0, 0]);
        }
        Head { len: payload.len(), kind: HEADERS, flags: flags | END_HEADERS, stream }.write(&mut out);
        out.extend_from_slice(&payload);
        out.extend_from_slice(&[0, 0, 5, 0, 1, 0, 0, 0, stream as u8, 0, 0, 0, 0, 0]);
        out
    }

    fn connection(requests: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend_from_slice(SETTINGS);
        bytes.extend_from_slice(WINDOW_UPDATE);
        for r in requests {
            bytes.extend_from_slice(r);
        }
        bytes
    }

    /// Runs `input` through a filter in pieces of `chunk` bytes.
    fn run(input: &[u8], chunk: usize) -> (Vec<u8>, Filter) {
        let mut filter = Filter::default();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            filter.feed(piece, &mut out).unwrap();
        }
        (out, filter)
    }

    /// The header blocks of a server-side reading of `bytes`, decoded with one decoder.
    fn server_view(bytes: &[u8]) -> Vec<(Head, Vec<hpack::Field>)> {
        assert!(bytes.starts_with(PREFACE));
        let mut at = PREFACE.len();
        let mut d = hpack::decoder();
        let mut seen = Vec::new();
        let mut block: Option<(Head, Vec<u8>)> = None;
        while at < bytes.len() {
            let head = Head::parse(&bytes[at..]);
            assert!(head.len <= SAFE_FRAME);
            let payload = &bytes[at + HEAD_LEN..at + HEAD_LEN + head.len];
            at += HEAD_LEN + head.len;
            match head.kind {
                HEADERS => block = Some((head, frame::headers_payload(head.flags, payload).unwrap().1.to_vec())),
                CONTINUATION => block.as_mut().unwrap().1.extend_from_slice(payload),
                _ => continue,
            }
            if head.flags & END_HEADERS != 0 {
                let (first, fragment) = block.take().unwrap();
                seen.push((first, d.decode(&fragment).unwrap()));
            }
        }
        seen
    }

    #[test]
    fn an_accepted_authority_goes_on_byte_for_byte_and_the_filter_steps_aside() {
        let mut e = IndexingEncoder::default();
        let input = connection(&[request(&mut e, 1, 0, &fields("[::]:50051", "/kiln.v1.Compiler/Stats"))]);
        for chunk in [1, 7, 4096] {
            let (out, filter) = run(&input, chunk);
            assert_eq!(out, input, "chunk {chunk}");
            assert!(filter.is_passthrough() && !filter.is_rewriting());
        }
    }

    #[test]
    fn a_refused_authority_is_replaced_in_every_block_with_the_clients_table_kept() {
        let mut e = IndexingEncoder::default();
        let sock = "tmp%2Fkiln%2Fkilnd.sock";
        let input = connection(&[
            request(&mut e, 1, 0, &fields(sock, "/kiln.v1.Compiler/Stats")),
            // The second refers to the first's table entries, padded and with priority fields.
            request(&mut e, 3, PADDED | PRIORITY | END_STREAM, &fields(sock, "/kiln.v1.Compiler/Lookup")),
        ]);
        for chunk in [1, 5, 9, 100, 1 << 16] {
            let (out, filter) = run(&input, chunk);
            assert!(filter.is_rewriting() && !filter.is_passthrough());
            let seen = server_view(&out);
            assert_eq!(seen.len(), 2);
            assert_eq!(seen[0].1, fields("localhost", "/kiln.v1.Compiler/Stats"));
            assert_eq!(seen[1].1, fields("localhost", "/kiln.v1.Compiler/Lookup"));
            assert_eq!((seen[0].0.stream, seen[0].0.flags), (1, END_HEADERS));
            assert_eq!((seen[1].0.stream, seen[1].0.flags), (3, END_HEADERS | END_STREAM | PRIORITY));
            // Every other frame is there unchanged: settings, window update, both DATA frames.
            assert!(out.windows(SETTINGS.len()).any(|w| w == SETTINGS));
            assert_eq!(out.windows(5).filter(|w| *w == [0, 0, 5, 0, 1]).count(), 2);
        }
    }

    #[test]
    fn a_block_split_over_continuations_is_collected_and_a_long_one_written_in_safe_frames() {
        let mut f = fields("tmp%2Fs.sock", "/kiln.v1.Compiler/Stats");
        f.push((b"x-big".to_vec(), vec![b'v'; 40_000]));
        let block = IndexingEncoder::default().encode(&f);
        let mut input = PREFACE.to_vec();
        let parts: Vec<&[u8]> = block.chunks(10_000).collect();
        for (i, part) in parts.iter().enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let flags = if i + 1 == parts.len() { END_HEADERS } else { 0 };
            Head { len: part.len(), kind, flags, stream: 1 }.write(&mut input);
            input.extend_from_slice(part);
        }
        let (out, filter) = run(&input, 3000);
        assert!(filter.is_rewriting());
        let seen = server_view(&out);
        f[3].1 = b"localhost".to_vec();
        assert_eq!(seen, vec![(seen[0].0, f)]);
    }

    #[test]
    fn streams_it_cannot_follow_go_on_untouched_while_looking() {
        let mut e = IndexingEncoder::default();
        let good = request(&mut e, 1, 0, &fields("tmp%2Fs.sock", "/p"));
        let cases: Vec<Vec<u8>> = vec![
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            // CONTINUATION with no HEADERS before it.
            connection(&[vec![0, 0, 1, CONTINUATION, END_HEADERS, 0, 0, 0, 1, 0x82]]),
            // Padding longer than the frame.
            connection(&[vec![0, 0, 2, HEADERS, END_HEADERS | PADDED, 0, 0, 0, 1, 9, 0x82]]),
            // A header block that does not decode (index 70 of an empty dynamic table).
            connection(&[vec![0, 0, 2, HEADERS, END_HEADERS, 0, 0, 0, 1, 0xbf, 0x07]]),
            // A HEADERS without END_HEADERS, then a DATA frame.
            connection(&[vec![0, 0, 1, HEADERS, 0, 0, 0, 0, 1, 0x82], good[good.len() - 14..].to_vec()]),
        ];
        for input in cases {
            let (out, filter) = run(&input, 4);
            assert_eq!(out, input);
            assert!(filter.is_passthrough());
        }
    }

    #[test]
    fn once_rewriting_a_broken_stream_is_an_error() {
        let mut e = IndexingEncoder::default();
        let mut input = connection(&[request(&mut e, 1, 0, &fields("tmp%2Fs.sock", "/p"))]);
        input.extend_from_slice(&[0, 0, 1, CONTINUATION, END_HEADERS, 0, 0, 0, 5, 0x82]);
        let mut filter = Filter::default();
        assert!(filter.feed(&input, &mut Vec::new()).is_err());
    }

    #[test]
    fn a_truncated_stream_is_handed_on_at_the_end() {
        let mut e = IndexingEncoder::default();
        let input = connection(&[request(&mut e, 1, 0, &fields("localhost", "/p"))]);
        let cut = &input[..input.len() - 20];
        let (mut out, mut filter) = run(cut, 8);
        filter.finish(&mut out);
        assert_eq!(out, cut);
        assert!(filter.is_passthrough());
    }

    proptest! {
        /// Whatever a client sends, the filter neither panics nor holds more than it must.
        #[test]
        fn any_bytes_are_handled_without_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..600),
            chunk in 1usize..64,
            refused in any::<bool>(),
        ) {
            let mut e = IndexingEncoder::default();
            let authority = if refused { "tmp%2Fs.sock" } else { "localhost" };
            let mut input = connection(&[request(&mut e, 1, 0, &fields(authority, "/p"))]);
            input.extend_from_slice(&tail);
            let mut filter = Filter::default();
            let mut out = Vec::new();
            for piece in input.chunks(chunk) {
                if filter.feed(piece, &mut out).is_err() {
                    break;
                }
            }
            prop_assert!(filter.pending.len() <= MAX_BLOCK_BYTES + HEAD_LEN);
        }

        /// Random bytes after the preface, without a good request first.
        #[test]
        fn random_frames_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut input = PREFACE.to_vec();
            input.extend_from_slice(&tail);
            let mut out = Vec::new();
            let mut filter = Filter::default();
            let _ = filter.feed(&input, &mut out);
            filter.finish(&mut out);
        }
    }
}
