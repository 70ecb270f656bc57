//! This host's name as the kernel has it: what a snapshot records as its saver, a recipe book as
//! its author, and (made safe for the wire) the fleet page as the reporting host.

/// A host name kiln-cache accepts: 1 to 253 characters of `[A-Za-z0-9._-]`; anything else in the
/// system's name becomes `-`.
pub fn wire_name(raw: &str) -> String {
    let name: String = raw
        .chars()
        .take(253)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .collect();
    if name.is_empty() { "unnamed-host".to_owned() } else { name }
}

/// The kernel's host name, or empty when it cannot be read.
pub fn name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_name_keeps_what_kiln_cache_accepts() {
        assert_eq!(wire_name("gpu 1.<lab>"), "gpu-1.-lab-");
        assert_eq!(wire_name(""), "unnamed-host");
    }
}
