//! Header blocks: a client's decoded with its dynamic table kept, and written again with a
//! refused `:authority` replaced, as literals that add nothing to the server's table.

use loona_hpack::Decoder;
pub use loona_hpack::decoder::DecoderError;

/// What a refused `:authority` becomes. The servers serve one host, so its value carries nothing.
pub const REPLACEMENT: &[u8] = b"localhost";

/// Largest dynamic table a client may ask for. The servers announce HTTP/2's default of 4096;
/// this leaves room for one configured larger and bounds what a client can make us keep.
const MAX_TABLE_BYTES: usize = 64 * 1024;

/// One decoded header field, name and value.
pub type Field = (Vec<u8>, Vec<u8>);

/// A decoder of one connection's header blocks: each block must be passed in order, because a
/// block may refer to fields an earlier one added to the table.
pub fn decoder() -> Decoder<'static> {
    let mut d = Decoder::new();
    d.set_max_allowed_table_size(MAX_TABLE_BYTES);
    d
}

/// Whether the server's HTTP/2 layer takes `value` as a request's `:authority`: h2 parses it as
/// `http::uri::Authority` and resets the stream with PROTOCOL_ERROR when that fails (a gRPC
/// client's Unix socket path, percent-encoded, does).
pub fn authority_accepted(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// What a connection's first header block says of its `:authority`, read without decoding the
/// block: `Some(true)` when it is absent or accepted, `Some(false)` when it would be refused,
/// `None` when this reading cannot tell (a reference to the dynamic table, a malformed block),
/// and the caller decodes the block in full.
///
/// Why not always decode: the decoder builds its Huffman table again for every string, which on
/// the first block of every connection cost kiln's own clients about 2 ms (debug build). Here only
/// the `:authority` value (and a literal name, rarely sent) is Huffman-decoded, with one table
/// per thread; every other string is skipped.
pub fn first_block_authority(block: &[u8]) -> Option<bool> {
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        let (name_index, literal) = if first & 0x80 != 0 {
            (integer_at(block, &mut at, 7)?, false)
        } else if first & 0xe0 == 0x20 {
            integer_at(block, &mut at, 5)?; // a dynamic table size update
            continue;
        } else if first & 0x40 != 0 {
            (integer_at(block, &mut at, 6)?, true)
        } else {
            (integer_at(block, &mut at, 4)?, true)
        };
        // The dynamic table is empty when the connection starts, so any index past the static
        // table names a field this block added: leave that to the full decoder.
        if name_index > 61 {
            return None;
        }
        if !literal {
            if name_index == 1 {
                return Some(false); // `:authority` with the static table's empty value
            }
            continue;
        }
        let is_authority = match name_index {
            0 => string_at(block, &mut at, true)? == b":authority",
            1 => true,
            _ => false,
        };
        let value = string_at(block, &mut at, is_authority)?;
        if is_authority {
            return Some(authority_accepted(&value));
        }
    }
    Some(true)
}

/// An HPACK integer at `*at` (§5.1), moving `*at` past it.
fn integer_at(block: &[u8], at: &mut usize, prefix_bits: u32) -> Option<usize> {
    let max = (1usize << prefix_bits) - 1;
    let mut n = usize::from(*block.get(*at)?) & max;
    *at += 1;
    if n < max {
        return Some(n);
    }
    for shift in (0..28).step_by(7) {
        let b = *block.get(*at)?;
        *at += 1;
        n += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// An HPACK string at `*at` (§5.2), moving `*at` past it, decoded when `read` (else empty); `None`
/// when malformed.
fn string_at(block: &[u8], at: &mut usize, read: bool) -> Option<Vec<u8>> {
    let huffman = *block.get(*at)? & 0x80 != 0;
    let len = integer_at(block, at, 7)?;
    let bytes = block.get(*at..at.checked_add(len)?)?;
    *at += len;
    if !read {
        return Some(Vec::new());
    }
    if !huffman {
        return Some(bytes.to_vec());
    }
    thread_local! {
        static HUFFMAN: std::cell::RefCell<loona_hpack::huffman::HuffmanDecoder> =
            std::cell::RefCell::new(loona_hpack::huffman::HuffmanDecoder::new());
    }
    HUFFMAN.with(|h| h.borrow_mut().decode(bytes).ok())
}

/// Whether any `:authority` among `fields` would be refused.
pub fn has_refused_authority(fields: &[Field]) -> bool {
    fields.iter().any(|(name, value)| name == b":authority" && !authority_accepted(value))
}

/// The block that says what `fields` says, with every refused `:authority` replaced by
/// [`REPLACEMENT`], each field a literal without indexing with a literal name (RFC 7541 §6.2.2):
/// the server's decoder table stays empty, so no later block depends on how this one was written.
pub fn encode(fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.iter().map(|(n, v)| n.len() + v.len() + 8).sum());
    for (name, value) in fields {
        let value = if name == b":authority" && !authority_accepted(value) { REPLACEMENT } else { value };
        out.push(0x00);
        string(&mut out, name);
        string(&mut out, value);
    }
    out
}

/// An HPACK string literal without Huffman coding (§5.2).
fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 7, 0x00, s.len());
    out.extend_from_slice(s);
}

/// An HPACK integer with an N-bit prefix (§5.1); `high` holds the first byte's other bits.
fn integer(out: &mut Vec<u8>, prefix_bits: u32, high: u8, mut n: usize) {
    let max = (1usize << prefix_bits) - 1;
    if n < max {
        out.push(high | n as u8);
        return;
    }
    out.push(high | max as u8);
    n -= max;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    fn fields(authority: &str) -> Vec<Field> {
        vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
            (b":path".to_vec(), b"/kiln.v1.Compiler/Stats".to_vec()),
            (b":authority".to_vec(), authority.as_bytes().to_vec()),
            (b"user-agent".to_vec(), vec![b'x'; 300]),
        ]
    }

    #[test]
    fn grpc_socket_paths_are_refused_and_host_names_accepted() {
        // What grpcio 1.84 sends for unix:///tmp/listeners/cap.sock.
        assert!(!authority_accepted(b"tmp%2Flisteners%2Fcap.sock"));
        assert!(!authority_accepted(b""));
        for ok in ["localhost", "[::]:50051", "127.0.0.1:7070", "kilnd.example:443"] {
            assert!(authority_accepted(ok.as_bytes()), "{ok}");
        }
    }

    #[test]
    fn encoded_blocks_decode_to_the_same_fields_with_the_authority_replaced() {
        let original = fields("tmp%2Fkiln%2Fkilnd.sock");
        assert!(has_refused_authority(&original));
        let block = encode(&original);
        // A fresh decoder each time: the block needs no table state.
        for _ in 0..2 {
            let back = decoder().decode(&block).unwrap();
            let mut want = original.clone();
            want[3].1 = REPLACEMENT.to_vec();
            assert_eq!(back, want);
        }
        let kept = fields("localhost:1");
        assert!(!has_refused_authority(&kept));
        assert_eq!(decoder().decode(&encode(&kept)).unwrap(), kept);
    }

    #[test]
    fn blocks_that_use_the_dynamic_table_decode_in_order() {
        // A client's encoder indexes fields; its second block refers to the first's entries.
        let original = fields("tmp%2Fs.sock");
        let mut encoder = IndexingEncoder::default();
        let (first, second) = (encoder.encode(&original), encoder.encode(&original));
        assert_eq!(second.len(), original.len(), "the second block is one index per field");
        let mut d = decoder();
        assert_eq!(d.decode(&first).unwrap(), original);
        assert_eq!(d.decode(&second).unwrap(), original);
        assert!(decoder().decode(&second).is_err(), "the second block needs the first's table entries");
    }

    /// What gRPC clients' encoders do: each new field is added to the dynamic table (a literal
    /// with incremental indexing, §6.2.1) and sent again as its index (§6.1).
    #[derive(Debug, Default)]
    pub(crate) struct IndexingEncoder {
        added: Vec<Field>,
    }

    impl IndexingEncoder {
        pub(crate) fn encode(&mut self, fields: &[Field]) -> Vec<u8> {
            let mut out = Vec::new();
            for field in fields {
                // The newest entry is index 62, just past the static table.
                match self.added.iter().rev().position(|f| f == field) {
                    Some(age) => integer(&mut out, 7, 0x80, 62 + age),
                    None => {
                        out.push(0x40);
                        string(&mut out, &field.0);
                        string(&mut out, &field.1);
                        self.added.push(field.clone());
                    }
                }
            }
            out
        }
    }

    #[test]
    fn the_first_blocks_authority_is_read_without_a_full_decode() {
        // RFC 7541 C.4.1 and C.4.2: `:authority: www.example.com` Huffman-coded, as h2 (tonic)
        // writes it; then the same request again, naming it by its dynamic table index.
        let huffman =
            vec![0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];
        let again = vec![0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf];
        let literal = |authority: &str| IndexingEncoder::default().encode(&fields(authority));
        for (block, want) in [
            (huffman, Some(true)),
            (again, None),
            (literal("localhost"), Some(true)),
            (literal("tmp%2Fkiln.sock"), Some(false)),
            (encode(&fields("x")[..3]), Some(true)), // no authority at all
            (vec![0x81], Some(false)),               // `:authority` indexed: empty
            (vec![0x20, 0xbe], None),                // a size update, then a dynamic index
            (vec![0x41, 0x85, 1, 2], None),          // a value cut short
            (vec![0x7f, 0xff, 0xff, 0xff, 0xff, 0xff], None),
        ] {
            assert_eq!(first_block_authority(&block), want, "{block:?}");
        }
        // A Huffman-coded literal name.
        let mut named = vec![0x00];
        named.extend_from_slice(&[10]);
        named.extend_from_slice(b":authority");
        named.extend_from_slice(&[3]);
        named.extend_from_slice(b"a%b");
        assert_eq!(first_block_authority(&named), Some(false));
    }

    proptest::proptest! {
        /// Any bytes: an answer or `None`, never a panic, and never a different answer from
        /// the full decoder's where both have one.
        #[test]
        fn any_block_is_read_without_panic(block in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let quick = first_block_authority(&block);
            if let (Some(quick), Ok(fields)) = (quick, decoder().decode(&block)) {
                let full = !has_refused_authority(&fields);
                // The quick reading stops at the first `:authority`; the full one sees them all.
                proptest::prop_assert!(quick == full || fields.iter().filter(|(n, _)| n == b":authority").count() > 1);
            }
        }
    }

    #[test]
    fn integers_use_continuation_bytes_past_the_prefix() {
        let mut out = Vec::new();
        integer(&mut out, 5, 0, 1337);
        assert_eq!(out, [31, 154, 10]); // RFC 7541 C.1.2
        out.clear();
        integer(&mut out, 7, 0, 126);
        assert_eq!(out, [126]);
        out.clear();
        integer(&mut out, 7, 0, 127);
        assert_eq!(out, [127, 0]);
    }
}
