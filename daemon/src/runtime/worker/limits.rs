//! Resource limits a worker puts on itself before it loads a compiler.

/// Caps the address space, so a runaway compile fails with out-of-memory instead of taking the
/// host's memory (and the daemon) with it.
pub fn limit_memory(megabytes: u64) -> std::io::Result<()> {
    let bytes = megabytes.saturating_mul(1024 * 1024) as libc::rlim_t;
    set(libc::RLIMIT_AS, bytes, bytes)
}

/// Allows `seconds` more CPU time from now. A worker lives across many compiles and RLIMIT_CPU
/// counts the whole process, so the soft limit moves forward before each compile; SIGXCPU then
/// ends a compile that spins, and the pool replaces the worker.
pub fn limit_cpu_from_now(seconds: u64) -> std::io::Result<()> {
    let used = cpu_seconds_used()?;
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut current) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let soft = (used.saturating_add(seconds.max(1)) as libc::rlim_t).min(current.rlim_max);
    set(libc::RLIMIT_CPU, soft, current.rlim_max)
}

fn cpu_seconds_used() -> std::io::Result<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer we pass and reads nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: getrusage succeeded, so the struct is initialised.
    let usage = unsafe { usage.assume_init() };
    Ok((usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + 1) as u64)
}

fn set(resource: libc::__rlimit_resource_t, soft: libc::rlim_t, hard: libc::rlim_t) -> std::io::Result<()> {
    let limit = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads the struct we pass and has no other memory effects.
    let rc = unsafe { libc::setrlimit(resource, &limit) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
