//! NVRTC called directly, in this process: the baseline that kiln's cold-compile overhead is
//! measured against.
//!
//! It loads the libraries the same way kilnd's workers do (daemon/src/runtime/worker/nvrtc_ffi.rs):
//! `libnvrtc-builtins.so.13.0` and then `libnvrtc.so.13` by absolute path with RTLD_GLOBAL,
//! before cudarc's first call, because cudarc's loader tries library names only and NVRTC loads
//! its builtins by name. It passes the same options kilnd's workers pass, so both produce the
//! same cubin and the difference in time is kiln's overhead alone.

use anyhow::{Context, Result, bail, ensure};
use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};
use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};

/// NVRTC, loaded and ready. The libraries stay loaded while this lives.
#[derive(Debug)]
pub struct Nvrtc {
    _builtins: Library,
    _nvrtc: Library,
    /// `--include-path=` options for the toolkit headers, as kilnd adds them.
    include_options: Vec<CString>,
}

impl Nvrtc {
    /// Loads NVRTC from a wheel's `nvidia/cu13` directory (or a toolkit root).
    pub fn load(cuda_root: &Path) -> Result<Nvrtc> {
        let lib = cuda_root.join("lib");
        let open = |p: PathBuf| {
            // SAFETY: loading NVIDIA's NVRTC libraries runs their initialisers; the path comes
            // from the pinned wheel tree, not from input.
            unsafe { Library::open(Some(&p), RTLD_NOW | RTLD_GLOBAL) }
                .with_context(|| format!("loading {}", p.display()))
        };
        let builtins = open(lib.join("libnvrtc-builtins.so.13.0"))?;
        let nvrtc = open(lib.join("libnvrtc.so.13"))?;
        // SAFETY: a dlopen probe; it cannot panic.
        ensure!(unsafe { sys::is_culib_present() }, "NVRTC loaded, but cudarc cannot find it by soname");
        let include = cuda_root.join("include");
        let mut include_options = vec![CString::new(format!("--include-path={}", include.display()))?];
        let cccl = include.join("cccl");
        if cccl.is_dir() {
            include_options.push(CString::new(format!("--include-path={}", cccl.display()))?);
        }
        Ok(Nvrtc { _builtins: builtins, _nvrtc: nvrtc, include_options })
    }

    /// Compiles one CUDA C++ source to a cubin for `target` (such as `sm_90`).
    pub fn compile(&self, source: &str, target: &str) -> Result<Vec<u8>> {
        let prog = self.program(source, target)?;
        let mut size = 0usize;
        // SAFETY: prog is compiled; writes one usize.
        check(unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }, "nvrtcGetCUBINSize")?;
        ensure!(size > 0, "NVRTC produced no cubin for {target}");
        let mut cubin = vec![0u8; size];
        // SAFETY: the buffer holds exactly the size NVRTC reported.
        check(unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }, "nvrtcGetCUBIN")?;
        Ok(cubin)
    }

    /// Compiles one CUDA C++ source to PTX for a virtual `arch` (such as `compute_90`).
    pub fn ptx(&self, source: &str, arch: &str) -> Result<String> {
        let prog = self.program(source, arch)?;
        let mut size = 0usize;
        // SAFETY: prog is compiled; writes one usize.
        check(unsafe { sys::nvrtcGetPTXSize(prog.0, &mut size) }, "nvrtcGetPTXSize")?;
        let mut ptx = vec![0u8; size];
        // SAFETY: the buffer holds exactly the size NVRTC reported.
        check(unsafe { sys::nvrtcGetPTX(prog.0, ptx.as_mut_ptr().cast()) }, "nvrtcGetPTX")?;
        let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
        Ok(String::from_utf8_lossy(&ptx[..end]).into_owned())
    }

    /// A program compiled for `arch` with the toolkit's include directories.
    fn program(&self, source: &str, arch: &str) -> Result<Program> {
        let source = CString::new(source).context("source contains a NUL byte")?;
        let mut prog: nvrtcProgram = std::ptr::null_mut();
        // SAFETY: the source and name are NUL-terminated and outlive the call; no headers.
        let r = unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                source.as_ptr(),
                c"kernel.cu".as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        check(r, "nvrtcCreateProgram")?;
        let prog = Program(prog);
        let arch = CString::new(format!("--gpu-architecture={arch}"))?;
        let options: Vec<*const c_char> =
            std::iter::once(&arch).chain(&self.include_options).map(|c| c.as_ptr()).collect();
        // SAFETY: prog is live; the option strings outlive the call.
        let r = unsafe { sys::nvrtcCompileProgram(prog.0, options.len() as c_int, options.as_ptr()) };
        if r != nvrtcResult::NVRTC_SUCCESS {
            bail!("NVRTC failed to compile: {}", prog.log());
        }
        Ok(prog)
    }
}

/// Owns an nvrtcProgram and destroys it on every path out.
struct Program(nvrtcProgram);

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: the program is live; writes one usize.
        if unsafe { sys::nvrtcGetProgramLogSize(self.0, &mut size) } != nvrtcResult::NVRTC_SUCCESS {
            return String::new();
        }
        let mut log = vec![0u8; size.max(1)];
        // SAFETY: the buffer holds the reported size, including the NUL.
        if unsafe { sys::nvrtcGetProgramLog(self.0, log.as_mut_ptr().cast()) } != nvrtcResult::NVRTC_SUCCESS {
            return String::new();
        }
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).into_owned()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn check(r: nvrtcResult, what: &str) -> Result<()> {
    if r == nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: nvrtcGetErrorString returns a static string for any result code.
    let text = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) }.to_string_lossy();
    bail!("{what}: {text}")
}
