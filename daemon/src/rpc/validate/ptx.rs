//! PTX kernels for ptxas: the text and allowlisted ptxas options.

use super::{Checked, Context, text, unavailable};
use crate::domain::KernelSource;
use crate::error::{Error, invalid};
use crate::runtime::toolchain::{Toolchain, options};
use kiln_proto::pb;

pub(super) fn check<'a>(p: &pb::PtxSource, field: &str, ctx: &Context<'a>) -> Result<Checked<'a>, Error> {
    let fingerprint = ctx.ptxas.map_err(|why| unavailable(field, Toolchain::Ptxas, why))?;
    text(&format!("{field}.ptx"), &p.ptx, ctx)?;
    for (j, o) in p.options.iter().enumerate() {
        options::check_ptxas(o).map_err(|e| invalid(format!("{field}.options[{j}]"), e))?;
    }
    Ok(Checked { source: KernelSource::Ptx(p.clone()), fingerprint, refusal: None })
}
