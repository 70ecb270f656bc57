//! Writes cubins to `--out DIR` as `<kernel-id>.cubin`.
//!
//! Each file is written to a temporary file in the same directory and renamed into place, so a
//! build tool watching the directory never sees a half-written cubin, and a run that is killed
//! leaves the previous file intact. No fsync: these are outputs the user can recompute (the cache
//! is the durable copy), and 64 fsyncs would cost more than a warm compile.

use anyhow::{Context, bail};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The `--out` directory, created when the command starts so a bad path fails before compiling.
#[derive(Debug)]
pub struct ArtifactDir {
    dir: PathBuf,
}

impl ArtifactDir {
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating --out directory {}", dir.display()))?;
        Ok(Self { dir: dir.to_path_buf() })
    }

    /// Writes one kernel's cubin and returns its path.
    pub fn write(&self, kernel_id: &str, cubin: &[u8]) -> anyhow::Result<PathBuf> {
        check_file_name(kernel_id)?;
        let path = self.dir.join(format!("{kernel_id}.cubin"));
        let write = || -> std::io::Result<()> {
            // 0666 before the umask, as a plain file create gives; tempfile defaults to 0600.
            let mut temp = tempfile::Builder::new()
                .prefix(".kiln-")
                .suffix(".tmp")
                .permissions(std::fs::Permissions::from_mode(0o666))
                .tempfile_in(&self.dir)?;
            temp.write_all(cubin)?;
            temp.persist(&path).map_err(|e| e.error)?;
            Ok(())
        };
        write().with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// Kernel ids come from the daemon, or from a hand-written `--graph` file, so one that would
/// name a path outside `--out` is refused rather than trusted.
pub fn check_file_name(kernel_id: &str) -> anyhow::Result<()> {
    if kernel_id.is_empty() || kernel_id.contains(['/', '\\', '\0']) {
        bail!("kernel id `{kernel_id}` cannot name a file in --out: ids written there must be plain file names");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_cubins_by_kernel_id_and_replaces_old_ones() {
        let root = tempfile::tempdir().unwrap();
        let out = ArtifactDir::create(&root.path().join("a/b")).unwrap();
        out.write("saxpy", b"old").unwrap();
        let path = out.write("saxpy", b"new").unwrap();
        assert_eq!(path, root.path().join("a/b/saxpy.cubin"));
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> =
            std::fs::read_dir(root.path().join("a/b")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["saxpy.cubin"], "no temporary file is left behind");
    }

    #[test]
    fn ids_that_are_paths_are_refused() {
        for id in ["", "../x", "a/b", "/abs"] {
            assert!(check_file_name(id).is_err(), "{id:?}");
        }
        for id in ["k", "..", "k.v2"] {
            assert!(check_file_name(id).is_ok(), "{id:?}");
        }
    }
}
