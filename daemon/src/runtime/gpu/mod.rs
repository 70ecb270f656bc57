//! The local GPUs, found through the CUDA driver (cudarc, loaded dynamically). A host with no
//! driver or no GPU is normal for kiln (build hosts, CPU-only CI): it simply has no default
//! target. cudarc panics when libcuda is missing, so presence is checked first.

pub mod load_check;

use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};
use kiln_proto::Target;
use kiln_proto::pb::Gpu;
use std::ffi::{CStr, c_char, c_int};

/// What the driver reported, or why there is nothing to report.
#[derive(Debug, Clone, Default)]
pub struct GpuProbe {
    /// The wire type itself: `Stats` answers this list as it is, and the host page and the
    /// report to kiln-cache read it from there. The target is text because the wire carries it
    /// so; `list` makes it from a `Target`, so it always parses.
    pub gpus: Vec<Gpu>,
    /// Why no GPU is listed, for `kiln doctor`.
    pub note: String,
}

impl GpuProbe {
    /// The target of the first GPU.
    pub fn default_target(&self) -> Option<Target> {
        self.gpus.first().and_then(|g| g.target.parse().ok())
    }
}

fn ok(r: CUresult, what: &str) -> Result<(), String> {
    if r == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what} failed: {r:?}")) }
}

/// Lists the GPUs. Never panics; a driver problem becomes the note.
pub fn probe() -> GpuProbe {
    // SAFETY: a dlopen probe by name; it cannot panic.
    if !unsafe { sys::is_culib_present() } {
        return GpuProbe { gpus: Vec::new(), note: "no CUDA driver (libcuda.so) on this host".into() };
    }
    match list() {
        Ok(gpus) if gpus.is_empty() => GpuProbe { gpus, note: "the CUDA driver reports no GPU".into() },
        Ok(gpus) => GpuProbe { gpus, note: String::new() },
        Err(note) => GpuProbe { gpus: Vec::new(), note },
    }
}

fn list() -> Result<Vec<Gpu>, String> {
    // SAFETY: the driver library is present (checked above); these calls write only into the
    // out-parameters we pass, sized as the API requires.
    unsafe {
        ok(sys::cuInit(0), "cuInit")?;
        let mut count: c_int = 0;
        ok(sys::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let mut dev = 0;
            ok(sys::cuDeviceGet(&mut dev, index), "cuDeviceGet")?;
            let mut name = [0 as c_char; 256];
            ok(sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev), "cuDeviceGetName")?;
            let (mut major, mut minor) = (0, 0);
            let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
            ok(sys::cuDeviceGetAttribute(&mut major, attr, dev), "cuDeviceGetAttribute")?;
            let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
            ok(sys::cuDeviceGetAttribute(&mut minor, attr, dev), "cuDeviceGetAttribute")?;
            gpus.push(Gpu {
                index: index as u32,
                name: CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned(),
                target: Target::from_capability(major as u32, minor as u32).to_string(),
            });
        }
        Ok(gpus)
    }
}
