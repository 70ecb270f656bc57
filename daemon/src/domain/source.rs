//! A kernel's source by toolchain, and the one place a source becomes key inputs.

use kiln_proto::pb::{self, triton_constexpr::Value};
use kiln_proto::{Fingerprint, KeyInputs, Target};

/// The toolchains kilnd compiles with, one per kind of source. Its name ([`Toolchain::as_str`])
/// is the metric label `toolchain`, the key's toolchain field, the artifact's `toolchain` and the
/// wire's `ToolchainInfo.name`: one spelling, written here only. It lives beside the sources (and
/// `crate::runtime::toolchain` re-exports it) so that the toolchains can take a [`KernelSource`] without an
/// import circle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Toolchain {
    Nvrtc,
    Ptxas,
    Triton,
}

impl Toolchain {
    /// Every toolchain, in the order `Stats` lists them.
    pub const ALL: [Toolchain; 3] = [Toolchain::Nvrtc, Toolchain::Ptxas, Toolchain::Triton];

    pub fn as_str(self) -> &'static str {
        match self {
            Toolchain::Nvrtc => "nvrtc",
            Toolchain::Ptxas => "ptxas",
            Toolchain::Triton => "triton",
        }
    }

    /// The toolchain named `name`, as [`Toolchain::as_str`] spells it.
    pub fn from_name(name: &str) -> Option<Toolchain> {
        Toolchain::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for Toolchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kernel's source, by toolchain.
///
/// The variants hold the validated wire messages themselves rather than copies in domain
/// structs: each message is what its toolchain is handed (the NVRTC worker's pipe carries
/// `CudaSource`, the Triton worker gets `TritonSource`'s fields), and the key inputs borrow its
/// fields directly. A domain copy would restate every field and add no invariant that
/// validation does not already give.
#[derive(Debug, Clone)]
pub enum KernelSource {
    Cuda(pb::CudaSource),
    Ptx(pb::PtxSource),
    Triton(pb::TritonSource),
}

impl KernelSource {
    /// The toolchain that compiles this source.
    pub(crate) fn toolchain(&self) -> Toolchain {
        match self {
            KernelSource::Cuda(_) => Toolchain::Nvrtc,
            KernelSource::Ptx(_) => Toolchain::Ptxas,
            KernelSource::Triton(_) => Toolchain::Triton,
        }
    }

    /// Whether the client asked for PTX beside the cubin.
    pub(crate) fn wants_ptx(&self) -> bool {
        matches!(self, KernelSource::Triton(t) if t.want_ptx)
    }

    /// Hands `f` this kernel's key inputs: the one place a validated source becomes key inputs,
    /// so the key (`derive`, at validation) and its recipe (`recipe`, on a miss or for `Explain`)
    /// always describe the same fields.
    pub(crate) fn with_key_inputs<R>(
        &self,
        target: &Target,
        fingerprint: &Fingerprint,
        f: impl FnOnce(&KeyInputs<'_>) -> R,
    ) -> R {
        let toolchain = self.toolchain().as_str();
        match self {
            KernelSource::Cuda(c) => {
                let headers: Vec<(&str, &[u8])> =
                    c.headers.iter().map(|h| (h.name.as_str(), h.content.as_bytes())).collect();
                f(&KeyInputs {
                    toolchain,
                    fingerprint,
                    target,
                    source: c.source.as_bytes(),
                    options: &c.options,
                    headers: &headers,
                    entries: &c.name_expressions,
                })
            }
            KernelSource::Ptx(p) => f(&KeyInputs {
                toolchain,
                fingerprint,
                target,
                source: p.ptx.as_bytes(),
                options: &p.options,
                headers: &[],
                entries: &[],
            }),
            KernelSource::Triton(t) => f(&KeyInputs {
                toolchain,
                fingerprint,
                target,
                source: t.source.as_bytes(),
                options: &triton_key_options(t),
                headers: &[],
                entries: std::slice::from_ref(&t.kernel_name),
            }),
        }
    }

    /// The Triton kernel's function name, part of a Triton kernel's identity; empty otherwise.
    pub(crate) fn kernel_name(&self) -> &str {
        match self {
            KernelSource::Triton(t) => &t.kernel_name,
            _ => "",
        }
    }
}

/// The Triton request as ordered option strings for the key. Each string starts with its kind
/// and separates parts with NUL, which no validated part contains (identifiers, types, numbers),
/// except a string constexpr, which comes last in its string; each string is length-prefixed by
/// the key encoding. Signature order is kept (it is the parameter order); constexprs and
/// attributes are sorted, since their order does not change the compile. Floats are keyed by
/// their bits, so 1024.0 and 1024 never collide.
pub(crate) fn triton_key_options(t: &pb::TritonSource) -> Vec<String> {
    let mut out: Vec<String> = t.signature.iter().map(|a| format!("sig\0{}\0{}", a.name, a.r#type)).collect();
    let mut constexprs: Vec<String> = t
        .constexprs
        .iter()
        .map(|c| match &c.value {
            Some(Value::IntValue(v)) => format!("constexpr\0{}\0int\0{v}", c.name),
            Some(Value::FloatValue(v)) => format!("constexpr\0{}\0float\0{:016x}", c.name, v.to_bits()),
            Some(Value::BoolValue(v)) => format!("constexpr\0{}\0bool\0{v}", c.name),
            Some(Value::StringValue(v)) => format!("constexpr\0{}\0str\0{v}", c.name),
            None => format!("constexpr\0{}\0none", c.name),
        })
        .collect();
    constexprs.sort();
    out.extend(constexprs);
    let mut attrs: Vec<String> =
        t.attributes.iter().map(|a| format!("attr\0{}\0{}\0{}", a.arg_index, a.name, a.value)).collect();
    attrs.sort();
    out.extend(attrs);
    let o = t.options.unwrap_or_default();
    let fusion = if o.enable_fp_fusion_set { o.enable_fp_fusion.to_string() } else { "default".into() };
    out.push(format!(
        "options\0num_warps={}\0num_stages={}\0num_ctas={}\0maxnreg={}\0enable_fp_fusion={fusion}",
        o.num_warps, o.num_stages, o.num_ctas, o.maxnreg
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::triton_source as sample;

    #[test]
    fn typed_constexprs_and_options_change_the_key_options() {
        let base = triton_key_options(&sample());
        let mut float = sample();
        float.constexprs[0].value = Some(Value::FloatValue(1024.0));
        assert_ne!(triton_key_options(&float), base, "1024 and 1024.0 must differ");
        let mut warps = sample();
        warps.options = Some(pb::TritonOptions { num_warps: 8, ..Default::default() });
        assert_ne!(triton_key_options(&warps), base);
        let mut order = sample();
        order.signature.reverse();
        assert_ne!(triton_key_options(&order), base, "parameter order is part of the key");
        let mut attr = sample();
        attr.attributes.push(pb::TritonAttribute { arg_index: 0, name: "tt.divisibility".into(), value: 16 });
        assert_ne!(triton_key_options(&attr), base);
    }
}
