//! What the store holds under a key and the hot tier keeps in memory: an artifact as published.
//! A leaf, so that the store and its hot tier each use it without using each other's.

use kiln_proto::pb::Provenance;

/// A stored artifact: its envelope, verified on read, and who published it (`None` for an
/// artifact stored before provenance was recorded, or whose record does not decode).
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub envelope: Vec<u8>,
    pub provenance: Option<Provenance>,
}
