//! How much auditing a host does: config reads it from flags and the file, and the audit in
//! `core/audit/` follows it. Here, below both, so that config need not reach into the core.

/// How much auditing a host does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditPolicy {
    /// The fraction of fleet artifacts audited besides the first artifact of a publisher not yet
    /// audited clean and every anonymous artifact: 0 audits only those, 1 audits everything.
    pub rate: f64,
    /// The share of one CPU audits may use, in (0, 1].
    pub cpu_share: f64,
    /// Off: nothing is audited (quarantines are still obeyed), nor vetted before use.
    pub enabled: bool,
    /// Whose fleet kernels run before this host compiled them (see `core::audit::vetting`).
    pub vet: kiln_proto::vet::VetPolicy,
}

impl Default for AuditPolicy {
    fn default() -> Self {
        AuditPolicy { rate: 0.02, cpu_share: 0.05, enabled: true, vet: kiln_proto::vet::VetPolicy::default() }
    }
}
