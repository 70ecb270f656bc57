//! The facts about this host that make a JIT cache's files valid, added by kilnd to every
//! snapshot key: a cache written for one GPU, driver or CUDA is useless (or worse) on another,
//! so a snapshot is only ever found by hosts that share them. Clients cannot set these parts.

use crate::runtime::gpu::GpuProbe;
use kiln_proto::Target;
use std::collections::BTreeMap;

/// Where the NVIDIA kernel module says its version.
const DRIVER_VERSION_FILE: &str = "/proc/driver/nvidia/version";

/// `host.gpu`: each distinct GPU as `<name> (<target>)`, sorted; `host.target`: the daemon's
/// default target (its first GPU, or `--target`); `host.driver`: the NVIDIA driver's major
/// version; `host.cuda`: the CUDA toolkit's version (NVRTC's). `none` where a fact is absent.
pub fn environment(gpus: &GpuProbe, default_target: Option<Target>, cuda_version: &str) -> BTreeMap<String, String> {
    let mut names: Vec<String> = gpus.gpus.iter().map(|g| format!("{} ({})", g.name, g.target)).collect();
    names.sort();
    names.dedup();
    let or_none = |s: String| if s.is_empty() { "none".to_string() } else { s };
    let driver = std::fs::read_to_string(DRIVER_VERSION_FILE).ok().and_then(|text| driver_major(&text));
    BTreeMap::from([
        ("host.gpu".to_string(), or_none(names.join(", "))),
        ("host.target".to_string(), default_target.map_or_else(|| "none".to_string(), |t| t.to_string())),
        ("host.driver".to_string(), driver.unwrap_or_else(|| "none".to_string())),
        ("host.cuda".to_string(), or_none(cuda_version.to_string())),
    ])
}

/// The major version in the kernel module's banner, such as `580` from
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ...`.
fn driver_major(banner: &str) -> Option<String> {
    let line = banner.lines().find(|l| l.starts_with("NVRM version"))?;
    let version =
        line.split_whitespace().find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))?;
    version.split('.').next().map(str::to_string)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kiln_proto::pb::Gpu;

    #[test]
    fn the_driver_major_comes_from_the_module_banner() {
        let banner =
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 2025\nGCC version: gcc 12\n";
        assert_eq!(driver_major(banner).as_deref(), Some("580"));
        assert_eq!(driver_major("nothing"), None);
    }

    #[test]
    fn gpus_are_listed_once_in_order() {
        let gpu = |index, name: &str| Gpu { index, name: name.into(), target: "sm_90".into() };
        let probe = GpuProbe { gpus: vec![gpu(0, "NVIDIA H100"), gpu(1, "NVIDIA H100")], note: String::new() };
        let env = environment(&probe, Some("sm_90".parse().unwrap()), "13.0");
        assert_eq!(env["host.gpu"], "NVIDIA H100 (sm_90)");
        assert_eq!(env["host.target"], "sm_90");
        assert_eq!(env["host.cuda"], "13.0");
        let none = environment(&GpuProbe::default(), None, "");
        assert_eq!((none["host.gpu"].as_str(), none["host.target"].as_str()), ("none", "none"));
    }
}
