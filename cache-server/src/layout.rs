//! Where things live in Redis and how the stored values are framed. Pure functions only, so the
//! formats are unit-tested without a server.
//!
//! Every key of one artifact carries the artifact's key in a hash tag (`{...}`), so in Redis
//! Cluster all its pieces share one slot and can be written in one MULTI/EXEC transaction:
//!
//! | key                         | value                                                        |
//! |-----------------------------|--------------------------------------------------------------|
//! | `kiln:v1:{<key>}:a`         | the head: [`Head`] (with the provenance) plus the envelope's first piece (≤ 1 MiB) |
//! | `kiln:v1:{<key>}:a:<n>`     | piece `n` (1-based) of an envelope above 1 MiB               |
//! | `kiln:v1:{<key>}:n`         | a negative entry (`NegativeEntry`, protobuf), short TTL      |
//! | `kiln:v1:{<key>}:lease`     | the fleet lease: the holder's token                          |
//! | `kiln:v1:{<graph>}:g`       | a graph manifest: [`encode_manifest`]                        |
//! | `kiln:v1:{<key>}:q`         | a quarantine record (`QuarantineRecord`, protobuf)           |
//! | `kiln:v1:{<key>}:qa[:<n>]`  | the quarantined head and pieces, kept as evidence            |
//! | `kiln:v1:{<key>}:c`         | the key's latest conflicting write (`ConflictRecord`)        |
//! | `kiln:v1:{audit}:quarantined` | quarantined keys: sorted set scored by quarantine time (ms)|
//! | `kiln:v1:{audit}:conflicts` | keys with a conflicting write: sorted set scored by its time |
//! | `kiln:v1:{status}:m:<min>`  | the status page's counts of one minute (a hash, see `status`)|
//! | `kiln:v1:{status}:leases`   | leases held: sorted set of keys scored by their expiry (ms)  |
//! | `kiln:v1:{status}:hosts`    | reporting kilnds: sorted set of `host[ instance]` by time    |
//! | `kiln:v1:{status}:h:<id>`   | a kilnd's last report, expiring when it stops reporting      |
//! | `kiln:v1:{torch}:jobs`      | torch.compile jobs: sorted set of names by their last report |
//! | `kiln:v1:{torch}:j:<job>`   | a job's fleet ledger (see `store::torch_jobs`)               |
//!
//! The status keys share one hash tag, so a page view's reads are one pipeline to one node of a
//! cluster, and a host's report is one transaction.
//!
//! Pieces are split at 1 MiB because Redis handles one huge value in one blocking step: freeing
//! or evicting it, migrating its slot to another node, and a 100 MiB key would stall every other
//! client of that node meanwhile.
//!
//! Publishes are announced on the one channel [`CHANNEL`], message = the key in hex.

use kiln_proto::CacheKey;

/// The pub/sub channel every publish is announced on. One shared channel, not one per key: plain
/// `PUBLISH` reaches every node of a Redis Cluster, so each kiln-cache replica needs exactly one
/// subscription, on any node, and fans the messages out to its watchers in process. Per-key
/// channels would need a SUBSCRIBE per waiter against Redis; publishes are cold compiles, a rate
/// every replica can afford to see in full.
pub const CHANNEL: &str = "kiln:v1:published";

/// Largest piece stored under one Redis key.
pub const PIECE_BYTES: usize = 1 << 20;

/// Magic of a head value, versioned so a future layout is never misread. A `KCH2` head carries
/// the artifact's provenance; `KCH1` heads (written before provenance was recorded) still read.
const HEAD_MAGIC: &[u8; 4] = b"KCH2";
const HEAD_MAGIC_V1: &[u8; 4] = b"KCH1";
/// magic + pieces u32 + total length u64 + blake3; a `KCH2` head adds the provenance's length
/// (u16) and the provenance. The digest sits at the same offset in both, which the quarantine
/// script relies on.
const HEAD_FIXED: usize = 4 + 4 + 8 + 32;
/// Where a head keeps the envelope's digest.
pub const HEAD_DIGEST: std::ops::Range<usize> = 16..48;
/// Largest provenance a head carries (an encoded `Provenance`: a host name, a token id, a time).
pub const MAX_PROVENANCE_BYTES: usize = 1024;
const MANIFEST_MAGIC: &[u8; 4] = b"KMF1";
/// The envelope's own magic and where it keeps its key (see `kiln_proto::envelope`): read here so
/// a read checks the key without decompressing the payload.
const ENVELOPE_MAGIC: &[u8; 8] = b"KILNART\0";
const ENVELOPE_KEY: std::ops::Range<usize> = 10..42;

pub fn head_key(key: &CacheKey) -> String {
    format!("kiln:v1:{{{key}}}:a")
}

/// Piece `n` of an envelope, `n >= 1`; piece 0 lives in the head.
pub fn piece_key(key: &CacheKey, n: u32) -> String {
    format!("kiln:v1:{{{key}}}:a:{n}")
}

pub fn negative_key(key: &CacheKey) -> String {
    format!("kiln:v1:{{{key}}}:n")
}

pub fn lease_key(key: &CacheKey) -> String {
    format!("kiln:v1:{{{key}}}:lease")
}

pub fn manifest_key(graph_key: &CacheKey) -> String {
    format!("kiln:v1:{{{graph_key}}}:g")
}

/// The status page's counts of one minute since the Unix epoch.
pub fn status_minute_key(minute: u64) -> String {
    format!("kiln:v1:{{status}}:m:{minute}")
}

pub const TORCH_JOBS: &str = "kiln:v1:{torch}:jobs";

/// A torch.compile job's fleet ledger. The job name is client text (no control characters); the
/// `{torch}` hash tag comes first, so every job shares one slot with the index.
pub fn torch_job_key(job: &str) -> String {
    format!("kiln:v1:{{torch}}:j:{job}")
}

pub const STATUS_LEASES: &str = "kiln:v1:{status}:leases";
pub const STATUS_HOSTS: &str = "kiln:v1:{status}:hosts";

/// A kilnd's last report. `daemon` is a validated host name (`[A-Za-z0-9._-]`) and maybe, after
/// a space, its instance (printable text, its socket path): the `{status}` hash tag comes first,
/// so neither can move the key to another cluster slot.
pub fn status_host_key(daemon: &str) -> String {
    format!("kiln:v1:{{status}}:h:{daemon}")
}

pub fn quarantine_key(key: &CacheKey) -> String {
    format!("kiln:v1:{{{key}}}:q")
}

/// Where a quarantined head (`n == 0`) or piece `n` is kept as evidence.
pub fn quarantined_piece_key(key: &CacheKey, n: u32) -> String {
    match n {
        0 => format!("kiln:v1:{{{key}}}:qa"),
        n => format!("kiln:v1:{{{key}}}:qa:{n}"),
    }
}

pub const QUARANTINED: &str = "kiln:v1:{audit}:quarantined";

pub fn conflict_key(key: &CacheKey) -> String {
    format!("kiln:v1:{{{key}}}:c")
}

pub const CONFLICTS: &str = "kiln:v1:{audit}:conflicts";

/// The fleet's vetting (see `crate::trust`): publishers an auditor vouched for, and publishers
/// quarantined since, each a set of publisher ids (`<token id> <host>`) in one slot.
pub const VETTED: &str = "kiln:v1:{trust}:vetted";
pub const DISTRUSTED: &str = "kiln:v1:{trust}:distrusted";

/// Why a stored value was refused on read. Each means: delete it, count it, answer a miss.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("head is not a kiln head (bad magic or truncated)")]
    BadHead,
    #[error("piece {0} is missing (evicted or never written)")]
    MissingPiece(u32),
    #[error("reassembled {found} bytes, head records {expected}")]
    Length { expected: u64, found: u64 },
    #[error("digest of the reassembled envelope does not match the head")]
    Digest,
    #[error("value is not an envelope of the requested key")]
    WrongKey,
    #[error("manifest is malformed or its digest does not match")]
    BadManifest,
}

/// The head's record of the whole envelope. Written last, in the same transaction as the
/// pieces, so a reader that finds a head finds every piece it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Pieces in all, the head's own included: 1 for an envelope of at most 1 MiB.
    pub pieces: u32,
    pub total_len: u64,
    /// blake3 of the whole envelope, checked after reassembly, so pieces of two different writes
    /// are never served as one.
    pub digest: [u8; 32],
    /// Who published it: an encoded `Provenance` as the server recorded it (empty in a `KCH1`
    /// head). Not covered by the digest, which is the envelope's; Redis's own integrity and the
    /// size bound are what protect it, and a reader decodes it as untrusted.
    pub provenance: Vec<u8>,
}

/// Splits an envelope into the head value (carrying `provenance`, at most
/// [`MAX_PROVENANCE_BYTES`]; longer is cut off) and the further pieces (`piece_key(key, 1..)`).
pub fn split<'a>(envelope: &'a [u8], provenance: &[u8]) -> (Vec<u8>, Vec<&'a [u8]>) {
    let mut pieces = envelope.chunks(PIECE_BYTES);
    let first = pieces.next().unwrap_or(&[]);
    let rest: Vec<&[u8]> = pieces.collect();
    let head = Head {
        pieces: 1 + rest.len() as u32,
        total_len: envelope.len() as u64,
        digest: *blake3::hash(envelope).as_bytes(),
        provenance: provenance.to_vec(),
    };
    (frame_head(&head, first), rest)
}

/// The head value `head` with another provenance: the same envelope, re-stamped (a conflicting
/// write marks the held artifact disputed). `None` when `head` is not a head.
pub fn restamp(head: &[u8], provenance: &[u8]) -> Option<Vec<u8>> {
    let (parsed, first) = parse_head(head).ok()?;
    Some(frame_head(&Head { provenance: provenance.to_vec(), ..parsed }, first))
}

/// A `KCH2` head value: `head`'s record (its provenance cut to [`MAX_PROVENANCE_BYTES`]) and the
/// envelope's first piece.
fn frame_head(head: &Head, first: &[u8]) -> Vec<u8> {
    let provenance = &head.provenance[..head.provenance.len().min(MAX_PROVENANCE_BYTES)];
    let mut out = Vec::with_capacity(HEAD_FIXED + 2 + provenance.len() + first.len());
    out.extend_from_slice(HEAD_MAGIC);
    out.extend_from_slice(&head.pieces.to_le_bytes());
    out.extend_from_slice(&head.total_len.to_le_bytes());
    out.extend_from_slice(&head.digest);
    out.extend_from_slice(&(provenance.len() as u16).to_le_bytes());
    out.extend_from_slice(provenance);
    out.extend_from_slice(first);
    out
}

/// Reads a head value: the record and the first piece.
pub fn parse_head(value: &[u8]) -> Result<(Head, &[u8]), LayoutError> {
    if value.len() < HEAD_FIXED {
        return Err(LayoutError::BadHead);
    }
    let (provenance, first) = match &value[..4] {
        m if m == HEAD_MAGIC => {
            let len = value.get(HEAD_FIXED..HEAD_FIXED + 2).ok_or(LayoutError::BadHead)?;
            let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
            if len > MAX_PROVENANCE_BYTES {
                return Err(LayoutError::BadHead);
            }
            let start = HEAD_FIXED + 2;
            let provenance = value.get(start..start + len).ok_or(LayoutError::BadHead)?;
            (provenance, &value[start + len..])
        }
        m if m == HEAD_MAGIC_V1 => (&[][..], &value[HEAD_FIXED..]),
        _ => return Err(LayoutError::BadHead),
    };
    let pieces = u32::from_le_bytes(value[4..8].try_into().map_err(|_| LayoutError::BadHead)?);
    let total_len = u64::from_le_bytes(value[8..16].try_into().map_err(|_| LayoutError::BadHead)?);
    let digest: [u8; 32] = value[HEAD_DIGEST].try_into().map_err(|_| LayoutError::BadHead)?;
    // The piece count follows from the length: a head that disagrees with itself is damaged,
    // and must not make a reader ask Redis for billions of pieces.
    let expected = total_len.div_ceil(PIECE_BYTES as u64).max(1);
    let first_len = total_len.min(PIECE_BYTES as u64);
    if u64::from(pieces) != expected || first.len() as u64 != first_len {
        return Err(LayoutError::BadHead);
    }
    Ok((Head { pieces, total_len, digest, provenance: provenance.to_vec() }, first))
}

/// Joins the first piece and the rest (`None` where Redis had no value), then checks length,
/// digest and that the envelope holds `key`. The envelope's own digest was checked in full on Put;
/// the head's digest proves these are still those bytes, so the payload is not decompressed here.
pub fn assemble(key: &CacheKey, head: &Head, first: &[u8], rest: Vec<Option<Vec<u8>>>) -> Result<Vec<u8>, LayoutError> {
    let mut out = Vec::with_capacity(head.total_len.min(1 << 30) as usize);
    out.extend_from_slice(first);
    for (i, piece) in rest.into_iter().enumerate() {
        let piece = piece.ok_or(LayoutError::MissingPiece(i as u32 + 1))?;
        out.extend_from_slice(&piece);
    }
    if out.len() as u64 != head.total_len {
        return Err(LayoutError::Length { expected: head.total_len, found: out.len() as u64 });
    }
    if blake3::hash(&out).as_bytes() != &head.digest {
        return Err(LayoutError::Digest);
    }
    if envelope_key(&out) != Some(*key) {
        return Err(LayoutError::WrongKey);
    }
    Ok(out)
}

/// The key an envelope says it holds, if it looks like an envelope at all.
fn envelope_key(envelope: &[u8]) -> Option<CacheKey> {
    if envelope.get(..8)? != ENVELOPE_MAGIC {
        return None;
    }
    let bytes: [u8; 32] = envelope.get(ENVELOPE_KEY)?.try_into().ok()?;
    Some(CacheKey::from_bytes(bytes))
}

/// A manifest value: magic, blake3 of the keys, then each kernel key's 32 bytes in graph order.
pub fn encode_manifest(kernel_keys: &[CacheKey]) -> Vec<u8> {
    let mut keys = Vec::with_capacity(kernel_keys.len() * 32);
    for k in kernel_keys {
        keys.extend_from_slice(k.as_bytes());
    }
    let mut out = Vec::with_capacity(4 + 32 + keys.len());
    out.extend_from_slice(MANIFEST_MAGIC);
    out.extend_from_slice(blake3::hash(&keys).as_bytes());
    out.extend_from_slice(&keys);
    out
}

pub fn decode_manifest(value: &[u8]) -> Result<Vec<CacheKey>, LayoutError> {
    if value.len() < 36 || &value[..4] != MANIFEST_MAGIC || !(value.len() - 36).is_multiple_of(32) {
        return Err(LayoutError::BadManifest);
    }
    let keys = &value[36..];
    if blake3::hash(keys).as_bytes() != &value[4..36] {
        return Err(LayoutError::BadManifest);
    }
    Ok(keys
        .chunks_exact(32)
        .map(|c| {
            let mut b = [0u8; 32];
            b.copy_from_slice(c);
            CacheKey::from_bytes(b)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::envelope;
    use kiln_proto::pb::ArtifactMeta;

    fn key(b: u8) -> CacheKey {
        CacheKey::from_bytes([b; 32])
    }

    /// An envelope of roughly `n` incompressible bytes.
    fn sealed(k: &CacheKey, n: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; n];
        blake3::Hasher::new().update(b"layout test").finalize_xof().fill(&mut bytes);
        envelope::seal(k, ArtifactMeta::default(), &bytes)
    }

    fn round_trip(env: &[u8], k: &CacheKey) -> Result<Vec<u8>, LayoutError> {
        let (head, rest) = split(env, b"provenance");
        let (h, first) = parse_head(&head)?;
        assert_eq!(h.pieces as usize, 1 + rest.len());
        assemble(k, &h, first, rest.iter().map(|p| Some(p.to_vec())).collect())
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = key(0xab);
        let tag = format!("{{{k}}}");
        for name in [head_key(&k), piece_key(&k, 3), negative_key(&k), lease_key(&k), manifest_key(&k)] {
            assert!(name.starts_with("kiln:v1:") && name.contains(&tag), "{name}");
        }
        assert_eq!(piece_key(&k, 2), format!("kiln:v1:{tag}:a:2"));
        for name in [status_minute_key(7), STATUS_LEASES.into(), STATUS_HOSTS.into(), status_host_key("gpu-1")] {
            assert!(name.starts_with("kiln:v1:{status}:"), "{name}");
        }
    }

    #[test]
    fn small_and_chunked_envelopes_round_trip() {
        let k = key(1);
        for n in [10, PIECE_BYTES - 200, 3 * PIECE_BYTES + 17] {
            let env = sealed(&k, n);
            assert_eq!(round_trip(&env, &k).unwrap(), env);
        }
        let big = sealed(&k, 3 * PIECE_BYTES + 17);
        assert_eq!(split(&big, b"").1.len(), 3);
    }

    #[test]
    fn heads_carry_provenance_and_older_heads_still_read() {
        let k = key(6);
        let env = sealed(&k, 500);
        let (head, _) = split(&env, b"who and when");
        let (record, first) = parse_head(&head).unwrap();
        assert_eq!(record.provenance, b"who and when");
        assert_eq!(&head[HEAD_DIGEST], blake3::hash(&env).as_bytes(), "the digest's offset is fixed");
        assert_eq!(assemble(&k, &record, first, vec![]).unwrap(), env);
        // A KCH1 head: no provenance field.
        let mut old = Vec::new();
        old.extend_from_slice(HEAD_MAGIC_V1);
        old.extend_from_slice(&head[4..HEAD_FIXED]);
        old.extend_from_slice(&env);
        let (record, first) = parse_head(&old).unwrap();
        assert!(record.provenance.is_empty());
        assert_eq!(assemble(&k, &record, first, vec![]).unwrap(), env);
        let long = vec![b'x'; MAX_PROVENANCE_BYTES + 10];
        let (head, _) = split(&env, &long);
        assert_eq!(parse_head(&head).unwrap().0.provenance.len(), MAX_PROVENANCE_BYTES);
        // Re-stamped: the same envelope, another provenance; an old head gains one.
        for head in [head, old] {
            let again = restamp(&head, b"disputed").unwrap();
            let (record, first) = parse_head(&again).unwrap();
            assert_eq!(record.provenance, b"disputed");
            assert_eq!(assemble(&k, &record, first, vec![]).unwrap(), env);
        }
        assert_eq!(restamp(b"not a head", b""), None);
    }

    #[test]
    fn a_missing_or_foreign_piece_is_refused() {
        let k = key(2);
        let env = sealed(&k, 2 * PIECE_BYTES + 5);
        let (head, rest) = split(&env, b"");
        let (h, first) = parse_head(&head).unwrap();
        let missing = vec![Some(rest[0].to_vec()), None];
        assert_eq!(assemble(&k, &h, first, missing), Err(LayoutError::MissingPiece(2)));
        let mut swapped = rest[1].to_vec();
        swapped[0] ^= 1;
        let mixed = vec![Some(rest[0].to_vec()), Some(swapped)];
        assert_eq!(assemble(&k, &h, first, mixed), Err(LayoutError::Digest));
    }

    #[test]
    fn any_flipped_head_byte_is_refused() {
        let k = key(3);
        let env = sealed(&k, 300);
        let (head, _) = split(&env, b"");
        for i in 0..head.len() {
            let mut bad = head.clone();
            bad[i] ^= 0x20;
            let refused = parse_head(&bad).and_then(|(h, first)| assemble(&k, &h, first, vec![]));
            assert!(refused.is_err(), "flip at byte {i} was accepted");
        }
    }

    #[test]
    fn an_envelope_under_another_key_is_refused() {
        let env = sealed(&key(4), 100);
        assert_eq!(round_trip(&env, &key(5)), Err(LayoutError::WrongKey));
    }

    #[test]
    fn manifests_round_trip_and_refuse_damage() {
        let keys = vec![key(1), key(2), key(9)];
        let value = encode_manifest(&keys);
        assert_eq!(decode_manifest(&value).unwrap(), keys);
        assert_eq!(decode_manifest(&encode_manifest(&[])).unwrap(), vec![]);
        let mut bad = value.clone();
        bad[40] ^= 1;
        assert_eq!(decode_manifest(&bad), Err(LayoutError::BadManifest));
        assert_eq!(decode_manifest(&value[..value.len() - 1]), Err(LayoutError::BadManifest));
    }
}
