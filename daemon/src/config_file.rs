//! Which configuration file kilnd reads. `--config FILE` (or `KILN_CONFIG`) names one; without
//! it, the first of these that exists:
//!
//! 1. `<kilnd's directory>/../etc/kiln/kilnd.toml`: the config of the install kilnd belongs to
//!    (`scripts/install --prefix DIR` puts kilnd in `DIR/bin` and this file, naming the
//!    toolchains it installed, in `DIR/etc/kiln`), so an installed kilnd finds its toolchains
//!    with no flags, whatever else the host has;
//! 2. `/etc/kiln/kilnd.toml`, the system's, for a kilnd installed without a config of its own.
//!
//! With neither, kilnd runs on its defaults, flags and `KILN_*` variables.

use std::path::{Path, PathBuf};

/// The system-wide file, read when kilnd's own install has none.
pub const SYSTEM: &str = "/etc/kiln/kilnd.toml";

/// The file of the install `exe` (kilnd itself) belongs to: `<exe dir>/../etc/kiln/kilnd.toml`.
pub fn beside(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.join("etc/kiln/kilnd.toml"))
}

/// The file to read: `explicit` when given (it must then exist: reading it reports it), else the
/// first of [`beside`] `exe` and [`SYSTEM`] that is a file, else none.
pub fn locate(explicit: Option<&Path>, exe: Option<&Path>) -> Option<PathBuf> {
    locate_with(explicit, exe, Path::new(SYSTEM))
}

/// [`locate`] with the system's file at `system`, so a test decides whether it exists rather
/// than finding whatever this host has.
fn locate_with(explicit: Option<&Path>, exe: Option<&Path>, system: &Path) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    exe.and_then(beside).into_iter().chain([system.to_path_buf()]).find(|p| p.is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_installs_own_config_comes_before_the_systems_and_a_flag_before_both() {
        let prefix = tempfile::tempdir().unwrap();
        let exe = prefix.path().join("bin/kilnd");
        let own = prefix.path().join("etc/kiln/kilnd.toml");
        let system = prefix.path().join("system/kilnd.toml");
        assert_eq!(beside(&exe), Some(own.clone()));
        assert_eq!(locate_with(None, Some(&exe), &system), None);
        std::fs::create_dir_all(system.parent().unwrap()).unwrap();
        std::fs::write(&system, "").unwrap();
        assert_eq!(locate_with(None, Some(&exe), &system), Some(system.clone()));
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        std::fs::write(&own, "").unwrap();
        assert_eq!(locate_with(None, Some(&exe), &system), Some(own));
        let flag = Path::new("/elsewhere/kilnd.toml");
        assert_eq!(locate_with(Some(flag), Some(&exe), &system), Some(flag.to_path_buf()));
    }
}
