//! Property tests of the values kiln-cache keeps in Redis: artifact heads, their pieces and graph
//! manifests. Redis holds them across restarts and versions, other writers share it, and memory
//! pressure evicts pieces one by one, so a read must refuse anything not written whole by one
//! `split`. `cargo test` runs a bounded number of cases; `scripts/fuzz` runs many more, and a
//! failure is kept in `cache-server/proptest-regressions/` and replayed first by every later run.
#![allow(clippy::unwrap_used)]

use kiln_cache_server::layout::{self, Head, LayoutError, PIECE_BYTES};
use kiln_proto::CacheKey;
use proptest::prelude::*;

#[path = "../../proto/tests/support/props.rs"]
mod support;
use support::config;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/layout_props.txt");

fn key() -> impl Strategy<Value = CacheKey> {
    any::<[u8; 32]>().prop_map(CacheKey::from_bytes)
}

/// Bytes that look like an envelope of `k` to kiln-cache (magic, version, key; the rest is not
/// read on this path): `n` bytes in all, a filler with random bytes sprinkled in.
fn envelope_of(k: &CacheKey, n: usize, fill: u8, sprinkle: &[(prop::sample::Index, u8)]) -> Vec<u8> {
    let mut env = b"KILNART\0\x01\x00".to_vec();
    env.extend_from_slice(k.as_bytes());
    env.resize(n.max(env.len()), fill);
    let body = env.len() - 42;
    for (at, b) in sprinkle.iter().filter(|_| body > 0) {
        env[42 + at.index(body)] = *b;
    }
    env
}

/// Envelope sizes around the piece boundaries, up to four pieces.
fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 42usize..4096,
        1 => (1usize..=4, -64isize..64).prop_map(|(n, d)| (n * PIECE_BYTES).saturating_add_signed(d).max(42)),
    ]
}

fn stored() -> impl Strategy<Value = (CacheKey, Vec<u8>)> {
    stored_of(size())
}

/// Envelopes of two to four pieces.
fn stored_in_pieces() -> impl Strategy<Value = (CacheKey, Vec<u8>)> {
    stored_of(prop_oneof![
        PIECE_BYTES + 1..4 * PIECE_BYTES,
        (2usize..=4, 0usize..64).prop_map(|(n, d)| n * PIECE_BYTES - d),
    ])
}

fn stored_of(size: impl Strategy<Value = usize>) -> impl Strategy<Value = (CacheKey, Vec<u8>)> {
    (key(), size, any::<u8>(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..32)).prop_map(
        |(k, n, fill, sprinkle)| {
            let env = envelope_of(&k, n, fill, &sprinkle);
            (k, env)
        },
    )
}

/// What a reader does with a head value and the pieces Redis returned for it.
fn read(k: &CacheKey, head: &[u8], rest: Vec<Option<Vec<u8>>>) -> Result<Vec<u8>, LayoutError> {
    let (record, first) = layout::parse_head(head)?;
    let out = layout::assemble(k, &record, first, rest)?;
    assert_eq!(out.len() as u64, record.total_len);
    Ok(out)
}

fn pieces(rest: &[&[u8]]) -> Vec<Option<Vec<u8>>> {
    rest.iter().map(|p| Some(p.to_vec())).collect()
}

/// A damaged set of pieces: every way eviction, a concurrent writer or a bad disk can leave them.
#[derive(Debug, Clone)]
enum Damage {
    Flip(prop::sample::Index, u8),
    Drop(prop::sample::Index),
    Truncate(prop::sample::Index, prop::sample::Index),
    Append(prop::sample::Index, Vec<u8>),
    Extra(Vec<u8>),
    Swap(prop::sample::Index, prop::sample::Index),
    Lose,
}

fn damage() -> impl Strategy<Value = Damage> {
    use prop::sample::Index;
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Damage::Flip(i, b)),
        any::<Index>().prop_map(Damage::Drop),
        (any::<Index>(), any::<Index>()).prop_map(|(i, j)| Damage::Truncate(i, j)),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..32)).prop_map(|(i, v)| Damage::Append(i, v)),
        prop::collection::vec(any::<u8>(), 1..32).prop_map(Damage::Extra),
        (any::<Index>(), any::<Index>()).prop_map(|(i, j)| Damage::Swap(i, j)),
        Just(Damage::Lose),
    ]
}

proptest! {
    #![proptest_config(config(64, CORPUS))]

    /// split, then parse_head and assemble give back the envelope; pieces are at most 1 MiB and
    /// the head counts them.
    #[test]
    fn split_then_read_round_trips((k, env) in stored()) {
        let (head, rest) = layout::split(&env, b"prov");
        prop_assert!(rest.iter().all(|p| !p.is_empty() && p.len() <= PIECE_BYTES));
        let (record, first) = layout::parse_head(&head).unwrap();
        prop_assert_eq!(record.pieces as usize, 1 + rest.len());
        prop_assert_eq!(first.len(), env.len().min(PIECE_BYTES));
        prop_assert_eq!(read(&k, &head, pieces(&rest)).unwrap(), env);
    }

    /// Pieces that are not exactly the ones written are refused: flipped, missing, cut short,
    /// longer, one too many, out of order.
    #[test]
    fn damaged_pieces_are_refused((k, env) in stored_in_pieces(), d in damage()) {
        let (head, rest) = layout::split(&env, b"prov");
        let mut got = pieces(&rest);
        let n = got.len();
        match d {
            Damage::Flip(i, bit) => {
                let p = got[i.index(n)].as_mut().unwrap();
                let at = i.index(p.len());
                p[at] ^= 1 << bit;
            }
            Damage::Drop(i) => got[i.index(n)] = None,
            Damage::Truncate(i, j) => {
                let p = got[i.index(n)].as_mut().unwrap();
                p.truncate(j.index(p.len()));
            }
            Damage::Append(i, v) => got[i.index(n)].as_mut().unwrap().extend_from_slice(&v),
            Damage::Extra(v) => got.push(Some(v)),
            Damage::Swap(i, j) => got.swap(i.index(n), j.index(n)),
            Damage::Lose => got.clear(),
        }
        // Damage that leaves the same bytes in the same order (two pieces of one filler swapped)
        // still reads as the envelope; anything else is refused.
        let joined = got.iter().cloned().collect::<Option<Vec<_>>>().map(|v| v.concat());
        if joined.as_deref() == Some(&env[PIECE_BYTES..]) {
            prop_assert_eq!(read(&k, &head, got).unwrap(), env);
        } else {
            prop_assert!(read(&k, &head, got).is_err());
        }
    }

    /// Any flipped bit of a head value is refused, by the head or by the reassembly. (The
    /// provenance a head carries is not the envelope's and is outside its digest: this head has
    /// none.)
    #[test]
    fn any_flipped_head_bit_is_refused((k, env) in stored(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (mut head, rest) = layout::split(&env, b"");
        let i = at.index(head.len());
        head[i] ^= 1 << bit;
        prop_assert!(read(&k, &head, pieces(&rest)).is_err());
    }

    /// An envelope read under another key is refused.
    #[test]
    fn another_key_is_refused((k, env) in stored(), other in key()) {
        prop_assume!(other != k);
        let (head, rest) = layout::split(&env, b"prov");
        prop_assert_eq!(read(&other, &head, pieces(&rest)), Err(LayoutError::WrongKey));
    }
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// Random head values, and forged ones with the magic and any counts and lengths, never panic;
    /// a head that parses is consistent with itself, so a reader never asks Redis for more pieces
    /// than its length needs, and its first piece is exactly what the length says.
    #[test]
    fn random_heads_never_panic(
        magic in any::<bool>(),
        pieces in prop_oneof![0u32..8, any::<u32>()],
        total in prop_oneof![0u64..8192, any::<u64>(), (1u64..8).prop_map(|n| n * PIECE_BYTES as u64)],
        digest in any::<[u8; 32]>(),
        tail in prop::collection::vec(any::<u8>(), 0..256),
        raw in prop::collection::vec(any::<u8>(), 0..128),
        k in key(),
    ) {
        let value = if magic {
            let mut v = b"KCH1".to_vec();
            v.extend_from_slice(&pieces.to_le_bytes());
            v.extend_from_slice(&total.to_le_bytes());
            v.extend_from_slice(&digest);
            v.extend_from_slice(&tail);
            v
        } else {
            raw
        };
        if let Ok((Head { pieces, total_len, .. }, first)) = layout::parse_head(&value) {
            prop_assert_eq!(u64::from(pieces), total_len.div_ceil(PIECE_BYTES as u64).max(1));
            prop_assert_eq!(first.len() as u64, total_len.min(PIECE_BYTES as u64));
            // Pieces of an unrelated write never reassemble under this head.
            if pieces <= 8 {
                let rest = (1..pieces).map(|_| Some(vec![0u8; PIECE_BYTES])).collect();
                let first = first.to_vec();
                let record = Head { pieces, total_len, digest, provenance: Vec::new() };
                prop_assert!(layout::assemble(&k, &record, &first, rest).is_err());
            }
        }
    }

    /// Manifests round-trip, keys in order.
    #[test]
    fn manifests_round_trip(keys in prop::collection::vec(key(), 0..64)) {
        prop_assert_eq!(layout::decode_manifest(&layout::encode_manifest(&keys)).unwrap(), keys);
    }

    /// A flipped bit, a cut or appended bytes in a manifest are refused.
    #[test]
    fn damaged_manifests_are_refused(
        keys in prop::collection::vec(key(), 0..16),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
        tail in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let value = layout::encode_manifest(&keys);
        let mut flipped = value.clone();
        flipped[at.index(value.len())] ^= 1 << bit;
        prop_assert_eq!(layout::decode_manifest(&flipped), Err(LayoutError::BadManifest));
        prop_assert_eq!(layout::decode_manifest(&value[..at.index(value.len())]), Err(LayoutError::BadManifest));
        let mut longer = value.clone();
        longer.extend_from_slice(&tail);
        prop_assert_eq!(layout::decode_manifest(&longer), Err(LayoutError::BadManifest));
    }

    /// Random bytes, with or without the manifest's magic, are refused and never panic.
    #[test]
    fn random_manifests_are_refused(magic in any::<bool>(), bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let value = if magic { [b"KMF1".as_slice(), &bytes].concat() } else { bytes };
        prop_assert_eq!(layout::decode_manifest(&value), Err(LayoutError::BadManifest));
    }
}
