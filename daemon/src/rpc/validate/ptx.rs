//! PTX kernels for ptxas: the text and allowlisted ptxas options.

use super::{Context, text, unavailable};
use crate::domain::{KernelJob, KernelSource};
use crate::error::{Error, invalid};
use crate::runtime::toolchain::{Toolchain, options};
use kiln_proto::Target;
use kiln_proto::pb;

pub(super) fn kernel(
    id: &str,
    p: &pb::PtxSource,
    target: &Target,
    field: &str,
    ctx: &Context<'_>,
) -> Result<KernelJob, Error> {
    let fingerprint = ctx.ptxas.map_err(|why| unavailable(field, Toolchain::Ptxas, why))?;
    text(&format!("{field}.ptx"), &p.ptx, ctx)?;
    for (j, o) in p.options.iter().enumerate() {
        options::check_ptxas(o).map_err(|e| invalid(format!("{field}.options[{j}]"), e))?;
    }
    let source = KernelSource::Ptx(p.clone());
    let key = source.with_key_inputs(target, fingerprint, |k| k.derive());
    Ok(KernelJob { id: id.to_string(), key, source, refusal: None })
}
