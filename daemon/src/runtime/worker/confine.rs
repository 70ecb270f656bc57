//! What a worker that runs client code gets between fork and exec: a network namespace of its
//! own (when kilnd is root: it has no interface but a loopback that is down), then an unprivileged
//! user, then the seccomp filter. Namespaces first, because creating one needs root; the filter
//! last, because it sets no_new_privs. All of it is inherited by everything the worker starts.

use super::seccomp::Filter;

/// How to confine one kind of worker; built before the fork, applied in `pre_exec`.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// A new, empty network namespace (needs root).
    pub new_network: bool,
    pub seccomp: Option<Filter>,
}

impl Confinement {
    /// Runs in the child between fork and exec: only system calls, no allocation.
    /// `user` is the uid/gid to run as, set here rather than by `Command::uid` because the
    /// namespace must be made while still root.
    pub fn apply(&self, user: Option<(u32, u32)>) -> std::io::Result<()> {
        let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) };
        // SAFETY: each call takes integer arguments (setgroups a null list of length 0) and
        // changes only this process's credentials or namespaces.
        unsafe {
            if self.new_network {
                check(libc::unshare(libc::CLONE_NEWNET))?;
            }
            if let Some((uid, gid)) = user {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(gid))?;
                check(libc::setuid(uid))?;
            }
        }
        if let Some(filter) = &self.seccomp {
            filter.install()?;
        }
        Ok(())
    }
}

/// Whether this process may create a network namespace: tried on a short-lived thread, since a
/// namespace created by unshare belongs to the calling thread only and ends with it.
pub fn can_create_network_namespace() -> Result<(), String> {
    let probe = std::thread::spawn(|| {
        // SAFETY: unshare with one flag; it affects only this thread, which then exits.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().to_string())
        }
    });
    probe.join().unwrap_or_else(|_| Err("the probe thread panicked".into()))
}
