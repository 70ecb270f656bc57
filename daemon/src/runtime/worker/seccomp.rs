//! A seccomp filter for workers that run client code (Triton's): it refuses, with EPERM, the
//! system calls that reach outside the worker's own process tree.
//!
//! - `socket`, for every family. A network namespace cuts TCP but not a Unix socket file (kilnd's
//!   own socket, Redis's), and a compile needs no socket: Triton runs ptxas through pipes.
//! - `io_uring_*`, which can open and connect sockets without calling `socket`.
//! - `ptrace`, `process_vm_readv`/`writev` and `pidfd_getfd`: a compile must not read or change
//!   another process of the same user (the zygote's protocol pipe, another compile).
//!
//! Calls of another architecture's ABI (x32, or i386 through `int 0x80`) are refused outright,
//! since their numbers differ. The program is built before the worker forks, so installing it in
//! the child is one `seccomp` call with no allocation.

/// The refused calls of this architecture, or `None` where kilnd does not know its numbers.
fn refused() -> Option<([libc::c_long; 8], u32)> {
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xC000_00B7;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    return Some((
        [
            libc::SYS_socket,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_pidfd_getfd,
        ],
        AUDIT_ARCH,
    ));
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    None
}

/// Where the x32 ABI's calls start on x86_64; no native call number reaches it.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// A built filter, ready to install.
#[derive(Clone)]
pub struct Filter {
    program: std::sync::Arc<[libc::sock_filter]>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({} instructions)", self.program.len())
    }
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}

impl Filter {
    /// The filter for this architecture, or `None` where there is none.
    pub fn build() -> Option<Filter> {
        use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
        let (calls, arch) = refused()?;
        let deny = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let arch_offset = std::mem::offset_of!(libc::seccomp_data, arch) as u32;
        let nr_offset = std::mem::offset_of!(libc::seccomp_data, nr) as u32;
        let mut p = vec![
            stmt(BPF_LD | BPF_W | BPF_ABS, arch_offset),
            // A foreign ABI: skip to the last instruction, which refuses.
            jump(BPF_JMP | BPF_JEQ | BPF_K, arch, 0, 0),
            stmt(BPF_LD | BPF_W | BPF_ABS, nr_offset),
            jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 0, 0),
        ];
        for call in calls {
            p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, call as u32, 0, 1));
            p.push(stmt(BPF_RET | BPF_K, deny));
        }
        p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
        p.push(stmt(BPF_RET | BPF_K, deny));
        let last = p.len() - 1;
        // Jump offsets count from the next instruction.
        p[1].jf = (last - 2) as u8;
        p[3].jt = (last - 4) as u8;
        Some(Filter { program: p.into() })
    }

    /// Installs the filter on the calling thread, after setting no_new_privs (which seccomp
    /// requires of an unprivileged process, and which keeps a setuid binary from regaining
    /// rights). Async-signal-safe: it allocates nothing, so it may run between fork and exec.
    pub fn install(&self) -> std::io::Result<()> {
        let program = libc::sock_fprog { len: self.program.len() as u16, filter: self.program.as_ptr().cast_mut() };
        // SAFETY: prctl and seccomp read only their integer arguments and the program, which
        // outlives both calls; the kernel copies the program.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &program) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The filter refuses `socket` in a child process and lets everything else through.
    #[test]
    fn a_filtered_child_cannot_open_a_socket_but_runs() {
        let Some(filter) = super::Filter::build() else { return };
        // SAFETY: the child calls only async-signal-safe functions (seccomp, socket, _exit).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed"); // can fail: fork returns -1 when it cannot fork
        if pid == 0 {
            let code = if filter.install().is_err() {
                10
            } else {
                // SAFETY: plain system calls in the child.
                let unix = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
                let errno = std::io::Error::last_os_error().raw_os_error();
                let pid = unsafe { libc::getpid() };
                if unix >= 0 {
                    11
                } else if errno != Some(libc::EPERM) {
                    12
                } else if pid <= 0 {
                    13
                } else {
                    0
                }
            };
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "10: install failed, 11: socket allowed, 12: wrong errno");
    }
}
