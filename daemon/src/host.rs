//! This host's name as the kernel has it: what a snapshot records as its saver, a recipe book as
//! its author, and (made safe for the wire) the fleet page as the reporting host.

/// The kernel's host name, or empty when it cannot be read.
pub fn name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}
