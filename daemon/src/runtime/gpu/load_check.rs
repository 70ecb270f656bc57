//! The load check: a fresh cubin is loaded on a local GPU before the artifact is cached. (This
//! is not request validation, which is `validate/`; the config key `validate_cubins` and the
//! metric `kiln_gpu_validations_total` keep their first names for users.)
//!
//! A fresh cubin whose target matches a local GPU is loaded with `cuModuleLoadData`, every entry
//! point is enumerated, loaded and measured (registers, shared, local and constant memory, the
//! block-size limit), and the module is unloaded. A cubin the driver refuses is a failed compile
//! and never reaches a cache.
//!
//! All driver calls run on one thread, which holds the device's primary context only while
//! cubins arrive and releases it after [`IDLE_RELEASE`] without one: a context costs
//! hundreds of MB of device memory and, in exclusive-process mode, the whole GPU, so kilnd never
//! keeps one open. Nothing here changes a device setting or allocates device memory beyond what
//! the module load itself needs.

use super::ok;
use cudarc::driver::sys::{self, CUcontext, CUfunction, CUfunction_attribute, CUmodule};
use kiln_proto::Target;
use kiln_proto::pb::{Gpu, KernelAttributes};
use std::ffi::{CStr, c_int, c_uint};
use std::sync::mpsc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long the load-check thread keeps the primary context after its last cubin.
pub const IDLE_RELEASE: Duration = Duration::from_secs(2);

type Reply = oneshot::Sender<Result<Vec<KernelAttributes>, String>>;

struct Request {
    device: c_int,
    cubin: Vec<u8>,
    reply: Reply,
}

/// Hands cubins to the load-check thread.
#[derive(Debug)]
pub struct LoadCheck {
    gpus: Vec<Gpu>,
    requests: std::sync::Mutex<mpsc::Sender<Request>>,
}

/// What the load check says about one cubin.
#[derive(Debug)]
pub enum LoadVerdict {
    Loaded {
        attributes: Vec<KernelAttributes>,
        note: String,
    },
    /// Not checked: the note says why.
    Skipped(String),
    /// The driver refused it; the message says how.
    Refused(String),
}

impl LoadCheck {
    /// Starts the load-check thread for `gpus` (from the probe, so the driver is present).
    pub fn start(gpus: Vec<Gpu>) -> LoadCheck {
        let (tx, rx) = mpsc::channel::<Request>();
        let spawned = std::thread::Builder::new().name("kiln-gpu-load".into()).spawn(move || serve(rx));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the GPU load-check thread; cubins will not be loaded");
        }
        LoadCheck { gpus, requests: std::sync::Mutex::new(tx) }
    }

    /// The local GPU a cubin for `target` can load on: same major and minor capability (an
    /// `sm_90a` cubin runs on compute capability 9.0 and nothing else).
    fn device_for(&self, target: &Target) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.target.parse::<Target>().is_ok_and(|t| t.capability() == target.capability()))
    }

    /// Loads `cubin`, compiled for `target`, on a local GPU of that target.
    pub async fn check(&self, target: &Target, cubin: &[u8]) -> LoadVerdict {
        let Some(gpu) = self.device_for(target) else {
            return LoadVerdict::Skipped(format!("not validated: no local GPU is {target}"));
        };
        let (reply, answer) = oneshot::channel();
        let request = Request { device: gpu.index as c_int, cubin: cubin.to_vec(), reply };
        let sent = self.requests.lock().map(|tx| tx.send(request).is_ok()).unwrap_or(false);
        if !sent {
            return LoadVerdict::Skipped("not validated: the validation thread is not running".into());
        }
        match answer.await {
            Ok(Ok(attributes)) => {
                LoadVerdict::Loaded { attributes, note: format!("loaded on {} ({target})", gpu.name) }
            }
            Ok(Err(why)) => LoadVerdict::Refused(format!("the cubin failed to load on {} ({target}): {why}", gpu.name)),
            Err(_) => LoadVerdict::Skipped("not validated: the validation thread stopped".into()),
        }
    }
}

/// The load-check thread: one cubin at a time, the primary context held between them until idle.
fn serve(requests: mpsc::Receiver<Request>) {
    let mut held: Option<(c_int, CUcontext)> = None;
    loop {
        let request = match requests.recv_timeout(IDLE_RELEASE) {
            Ok(request) => request,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                release(&mut held);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if held.is_some_and(|(device, _)| device != request.device) {
            release(&mut held);
        }
        let result = current(&mut held, request.device).and_then(|()| load_and_measure(&request.cubin));
        let _ = request.reply.send(result);
    }
    release(&mut held);
}

/// Makes `device`'s primary context current on this thread, retaining it if not held yet.
fn current(held: &mut Option<(c_int, CUcontext)>, device: c_int) -> Result<(), String> {
    if held.is_none() {
        let mut ctx: CUcontext = std::ptr::null_mut();
        let mut dev = 0;
        // SAFETY: out-parameters of the documented types; the driver is initialised by the probe.
        unsafe {
            ok(sys::cuDeviceGet(&mut dev, device), "cuDeviceGet")?;
            ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "cuDevicePrimaryCtxRetain")?;
        }
        *held = Some((device, ctx));
    }
    let Some((_, ctx)) = *held else { return Err("no context".into()) };
    // SAFETY: `ctx` is a retained primary context.
    unsafe { ok(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent") }
}

fn release(held: &mut Option<(c_int, CUcontext)>) {
    if let Some((device, _)) = held.take() {
        // SAFETY: releases the one reference `current` retained; the thread's current context
        // is cleared first so nothing refers to it afterwards.
        unsafe {
            let _ = sys::cuCtxSetCurrent(std::ptr::null_mut());
            let mut dev = 0;
            if sys::cuDeviceGet(&mut dev, device) == sys::CUresult::CUDA_SUCCESS {
                let _ = sys::cuDevicePrimaryCtxRelease_v2(dev);
            }
        }
    }
}

/// Loads the module, measures every entry point, unloads it.
fn load_and_measure(cubin: &[u8]) -> Result<Vec<KernelAttributes>, String> {
    // The driver reads an ELF image by its header, so it needs no length; it must not read past
    // our buffer, which a valid ELF never asks it to. The envelope already verified the bytes.
    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: `cubin` outlives the call; `module` is an out-parameter.
    unsafe { ok(sys::cuModuleLoadData(&mut module, cubin.as_ptr().cast()), "cuModuleLoadData")? };
    let measured = measure(module);
    // SAFETY: `module` was loaded above and is not used after this.
    unsafe {
        let _ = sys::cuModuleUnload(module);
    }
    measured
}

fn measure(module: CUmodule) -> Result<Vec<KernelAttributes>, String> {
    let mut count: c_uint = 0;
    // SAFETY: out-parameters sized as the API requires: `functions` holds `count` handles.
    unsafe {
        ok(sys::cuModuleGetFunctionCount(&mut count, module), "cuModuleGetFunctionCount")?;
        let mut functions: Vec<CUfunction> = vec![std::ptr::null_mut(); count as usize];
        ok(sys::cuModuleEnumerateFunctions(functions.as_mut_ptr(), count, module), "cuModuleEnumerateFunctions")?;
        functions.into_iter().map(|f| attributes_of(module, f)).collect()
    }
}

/// # Safety
/// `function` must be a handle from `module`, which must be loaded.
unsafe fn attributes_of(module: CUmodule, function: CUfunction) -> Result<KernelAttributes, String> {
    use CUfunction_attribute::*;
    // SAFETY: per the function's contract; the name pointer is owned by the driver and valid
    // while the module is loaded, and copied before returning.
    unsafe {
        let mut name_ptr = std::ptr::null();
        ok(sys::cuFuncGetName(&mut name_ptr, function), "cuFuncGetName")?;
        let name = CStr::from_ptr(name_ptr).to_string_lossy().into_owned();
        // Lazy loading (the default) defers each function's load to first use: force it now,
        // and resolve the entry point by name as a launcher would.
        ok(sys::cuFuncLoad(function), "cuFuncLoad").map_err(|e| format!("{name}: {e}"))?;
        let mut resolved: CUfunction = std::ptr::null_mut();
        ok(sys::cuModuleGetFunction(&mut resolved, module, name_ptr), "cuModuleGetFunction")
            .map_err(|e| format!("{name}: {e}"))?;
        let attr = |which| {
            let mut v: c_int = 0;
            ok(sys::cuFuncGetAttribute(&mut v, which, resolved), "cuFuncGetAttribute").map(|()| v.max(0) as u32)
        };
        Ok(KernelAttributes {
            registers: attr(CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_shared_bytes: attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            max_threads_per_block: attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            local_bytes: attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
            const_bytes: attr(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?,
            name,
        })
    }
}
