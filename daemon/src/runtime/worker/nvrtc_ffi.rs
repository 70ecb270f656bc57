//! The NVRTC calls a worker makes, through cudarc's `sys` bindings.
//!
//! cudarc's loader tries library *names* only and panics when none loads; NVRTC itself dlopens
//! `libnvrtc-builtins.so.13.0` by name. So [`load`] opens both libraries by absolute path with
//! RTLD_GLOBAL first: the dynamic loader then answers cudarc's and NVRTC's by-name lookups with
//! the copies already loaded (matched by soname), and `LD_LIBRARY_PATH` plays no part. cudarc's
//! safe wrapper returns PTX only, so the cubin comes from `nvrtcGetCUBIN` here.

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};
use kiln_proto::pb::{CudaSource, LoweredName};
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::Path;

/// Keeps the libraries loaded for the life of the worker.
#[derive(Debug)]
pub struct Loaded {
    _builtins: libloading::os::unix::Library,
    _nvrtc: libloading::os::unix::Library,
}

/// Loads NVRTC and its builtins by absolute path. An error here, not a panic, is what a missing
/// or broken library becomes.
pub fn load(nvrtc_path: &Path, builtins: &Path) -> Result<Loaded, String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a shared library runs its initialisers; these are NVIDIA's NVRTC libraries,
    // chosen by the daemon's configuration, never by a client.
    let open = |p: &Path| unsafe { Library::open(Some(p), RTLD_NOW | RTLD_GLOBAL) };
    let builtins = open(builtins).map_err(|e| format!("loading {}: {e}", builtins.display()))?;
    let nvrtc = open(nvrtc_path).map_err(|e| format!("loading {}: {e}", nvrtc_path.display()))?;
    // SAFETY: a plain dlopen probe; it cannot panic.
    if !unsafe { sys::is_culib_present() } {
        return Err(format!("{} loaded, but cudarc cannot find it by soname", nvrtc_path.display()));
    }
    Ok(Loaded { _builtins: builtins, _nvrtc: nvrtc })
}

fn check(r: nvrtcResult, what: &str) -> Result<(), String> {
    if r == nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static string for any result code.
    let text = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) }.to_string_lossy().into_owned();
    Err(format!("{what}: {text}"))
}

/// "13.0".
pub fn version() -> Result<String, String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    check(unsafe { sys::nvrtcVersion(&mut major, &mut minor) }, "nvrtcVersion")?;
    Ok(format!("{major}.{minor}"))
}

/// The real architectures this NVRTC can compile for, as `sm_NN`.
pub fn supported_targets() -> Result<Vec<String>, String> {
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    check(unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }, "nvrtcGetNumSupportedArchs")?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    // SAFETY: the buffer holds exactly the number of archs NVRTC reported.
    check(unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }, "nvrtcGetSupportedArchs")?;
    Ok(archs.into_iter().map(|a| format!("sm_{a}")).collect())
}

/// What one NVRTC program produced, as the worker answers it (`WorkerResponse`): the
/// daemon side makes a `toolchain::Compiled` of it.
#[derive(Debug, Default)]
pub struct ProgramOutput {
    pub ok: bool,
    pub cubin: Vec<u8>,
    pub log: String,
    pub lowered_names: Vec<LoweredName>,
}

/// Owns an nvrtcProgram and destroys it on every path out.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn cstring(s: &str, what: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} contains a NUL byte"))
}

/// Compiles CUDA C++ to a cubin for `target` (such as `sm_90a`).
pub fn compile(src: &CudaSource, target: &str, include_dirs: &[String]) -> Result<ProgramOutput, String> {
    let source = cstring(&src.source, "source")?;
    let names: Vec<CString> = src.headers.iter().map(|h| cstring(&h.name, "header name")).collect::<Result<_, _>>()?;
    let contents: Vec<CString> =
        src.headers.iter().map(|h| cstring(&h.content, "header content")).collect::<Result<_, _>>()?;
    let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
    let content_ptrs: Vec<*const c_char> = contents.iter().map(|c| c.as_ptr()).collect();
    let mut prog: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all pointers are to NUL-terminated strings that outlive the call; counts match.
    check(
        unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                source.as_ptr(),
                c"kernel.cu".as_ptr(),
                names.len() as c_int,
                content_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        },
        "nvrtcCreateProgram",
    )?;
    let prog = Program(prog);
    let exprs: Vec<CString> =
        src.name_expressions.iter().map(|e| cstring(e, "name expression")).collect::<Result<_, _>>()?;
    for e in &exprs {
        // SAFETY: prog is live; e is NUL-terminated and outlives the program.
        check(unsafe { sys::nvrtcAddNameExpression(prog.0, e.as_ptr()) }, "nvrtcAddNameExpression")?;
    }
    let mut options: Vec<CString> = src.options.iter().map(|o| cstring(o, "option")).collect::<Result<_, _>>()?;
    options.push(cstring(&format!("--gpu-architecture={target}"), "target")?);
    for dir in include_dirs {
        options.push(cstring(&format!("--include-path={dir}"), "include dir")?);
    }
    let option_ptrs: Vec<*const c_char> = options.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: prog is live; the option pointers outlive the call.
    let compiled = unsafe { sys::nvrtcCompileProgram(prog.0, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    let mut out = ProgramOutput { log: program_log(&prog)?, ..Default::default() };
    if compiled != nvrtcResult::NVRTC_SUCCESS {
        return Ok(out);
    }
    for (expr, text) in exprs.iter().zip(&src.name_expressions) {
        let mut lowered: *const c_char = std::ptr::null();
        // SAFETY: prog is compiled; NVRTC owns the returned string until the program is destroyed.
        let r = unsafe { sys::nvrtcGetLoweredName(prog.0, expr.as_ptr(), &mut lowered) };
        if let Err(e) = check(r, "nvrtcGetLoweredName") {
            out.log.push_str(&format!("\nname expression `{text}` could not be resolved: {e}\n"));
            return Ok(out);
        }
        // SAFETY: on success NVRTC returned a NUL-terminated string.
        let lowered = unsafe { CStr::from_ptr(lowered) }.to_string_lossy().into_owned();
        out.lowered_names.push(LoweredName { name_expression: text.clone(), lowered_name: lowered });
    }
    let mut size = 0usize;
    // SAFETY: prog is compiled; writes one usize.
    check(unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }, "nvrtcGetCUBINSize")?;
    if size == 0 {
        out.log.push_str("\nNVRTC produced no cubin for this target\n");
        return Ok(out);
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds exactly the size NVRTC reported.
    check(unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }, "nvrtcGetCUBIN")?;
    out.cubin = cubin;
    out.ok = true;
    Ok(out)
}

fn program_log(prog: &Program) -> Result<String, String> {
    let mut size = 0usize;
    // SAFETY: prog is live; writes one usize.
    check(unsafe { sys::nvrtcGetProgramLogSize(prog.0, &mut size) }, "nvrtcGetProgramLogSize")?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: the buffer holds the reported size, including the NUL.
    check(unsafe { sys::nvrtcGetProgramLog(prog.0, log.as_mut_ptr().cast()) }, "nvrtcGetProgramLog")?;
    let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
    Ok(String::from_utf8_lossy(&log[..end]).into_owned())
}
