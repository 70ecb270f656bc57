//! Which protections the Triton box (`triton_box.py`, and [`crate::runtime::worker::confine`]) gets on
//! this host. Probed once per kilnd, when the toolchains are set up; every protection the kernel
//! or kilnd's rights cannot give is logged then, once, with the reason. A worker's hello then
//! says what it actually got, and a start whose worker lacks a protection the probe found is
//! refused: a box that silently came up weaker than promised is worse than no Triton.

use crate::runtime::worker::confine::{self, Confinement};
use crate::runtime::worker::seccomp::Filter;
use serde_json::Value as Json;
use std::sync::OnceLock;

/// What this host gives Triton compiles.
#[derive(Debug)]
pub struct Protections {
    /// Whether kilnd is root: only then do Triton workers drop to `nobody` and get a network
    /// namespace of their own.
    pub root: bool,
    /// Landlock's ABI version (0: none), checked by the worker in each compile child.
    pub landlock_abi: i64,
    /// A new network namespace per worker, or why not.
    pub network_namespace: Result<(), String>,
    /// The seccomp filter that refuses sockets, or why there is none.
    pub seccomp: Result<Filter, String>,
}

static PROTECTIONS: OnceLock<Protections> = OnceLock::new();

/// The protections of this host, probed (and what is missing logged) on the first call.
pub fn protections() -> &'static Protections {
    PROTECTIONS.get_or_init(|| {
        let p = Protections::probe();
        p.log_missing();
        p
    })
}

impl Protections {
    fn probe() -> Protections {
        // SAFETY: geteuid has no failure mode and no side effects.
        let root = unsafe { libc::geteuid() } == 0;
        let network_namespace = if root {
            confine::can_create_network_namespace().map_err(|e| format!("unshare(CLONE_NEWNET) failed: {e}"))
        } else {
            Err("kilnd is not root".into())
        };
        Protections { root, landlock_abi: landlock_abi(), network_namespace, seccomp: seccomp() }
    }

    fn log_missing(&self) {
        if self.landlock_abi == 0 {
            tracing::warn!(
                "Triton box: no Landlock on this kernel (5.13 or newer, with landlock in the LSM list): a Triton \
                 compile can read and write whatever the `nobody` user can"
            );
        } else if self.landlock_abi < 4 {
            tracing::warn!(
                abi = self.landlock_abi,
                "Triton box: Landlock older than ABI 4 (kernel 6.7): TCP is refused by seccomp alone"
            );
        }
        if self.landlock_abi > 0 && self.landlock_abi < 6 {
            tracing::warn!(
                abi = self.landlock_abi,
                "Triton box: Landlock older than ABI 6 (kernel 6.12): a compile can signal other processes of its user"
            );
        }
        if !self.root {
            tracing::warn!(
                "Triton box: kilnd is not root, so Triton compiles run as kilnd's own user (not `nobody`) and in \
                 kilnd's network namespace; Landlock and seccomp (where present) still confine them. Run kilnd \
                 as root for the full box"
            );
        } else if let Err(why) = &self.network_namespace {
            tracing::warn!(%why, "Triton box: no network namespace for Triton workers; seccomp still refuses sockets");
        }
        if let Err(why) = &self.seccomp {
            tracing::warn!(%why, "Triton box: no seccomp filter: a Triton compile can open sockets");
        }
    }

    /// The confinement kilnd applies between fork and exec of each worker.
    pub fn confinement(&self) -> Confinement {
        Confinement { new_network: self.network_namespace.is_ok(), seccomp: self.seccomp.as_ref().ok().cloned() }
    }

    /// Checks a worker's report of its box (`box` in its hello) against what was promised.
    pub fn verify(&self, report: Option<&Json>) -> Result<(), String> {
        let report = report.ok_or("the worker's hello does not describe its box")?;
        let abi = report.get("landlock_abi").and_then(Json::as_i64).unwrap_or(0);
        if abi < self.landlock_abi {
            return Err(format!("the worker sees Landlock ABI {abi}, kilnd saw {}", self.landlock_abi));
        }
        if self.seccomp.is_ok() && report.get("seccomp_filter") != Some(&Json::Bool(true)) {
            return Err("the worker runs without its seccomp filter".into());
        }
        let netns = report.get("netns").and_then(Json::as_str).unwrap_or_default();
        if self.network_namespace.is_ok() && (netns.is_empty() || netns == own_network_namespace()) {
            return Err("the worker shares kilnd's network namespace".into());
        }
        Ok(())
    }

    /// One line for `kiln toolchains`: what a Triton compile runs in here.
    pub fn summary(&self) -> String {
        let user = if self.root { "as nobody" } else { "as kilnd's own user (kilnd is not root)" };
        let mut parts = vec![format!("a process per compile, {user}")];
        if self.landlock_abi > 0 {
            parts.push(format!("Landlock ABI {}", self.landlock_abi));
        }
        if self.network_namespace.is_ok() {
            parts.push("own network namespace".into());
        }
        if self.seccomp.is_ok() {
            parts.push("seccomp".into());
        }
        parts.join(", ")
    }
}

fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the version flag, the call only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    abi.max(0)
}

fn seccomp() -> Result<Filter, String> {
    // SAFETY: PR_GET_SECCOMP only reads this thread's mode; EINVAL means no seccomp in the kernel.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } < 0 {
        return Err(format!("the kernel has no seccomp: {}", std::io::Error::last_os_error()));
    }
    Filter::build().ok_or_else(|| format!("kilnd has no seccomp filter for {}", std::env::consts::ARCH))
}

fn own_network_namespace() -> String {
    std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string()).unwrap_or_default()
}
