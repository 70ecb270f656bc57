//! The graph's kernels as a tree of `.cu` files, and passes over it that run one compiler
//! process per file with a fixed number at a time, as `make -j` does: the way a build system
//! drives nvcc, sccache, or the `kiln compile` CLI.

use super::{Bench, GRAPH_KERNELS, work_queue};
use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The `.cu` files and where their cubins go.
#[derive(Debug)]
pub struct SourceTree {
    pub sources: Vec<PathBuf>,
    pub out: PathBuf,
}

impl SourceTree {
    /// Writes the graph's kernels as `src/add_N.cu` under a fresh directory.
    pub fn write(bench: &Bench) -> Result<SourceTree> {
        let root = bench.dir("nvcc-tree")?;
        let src = root.join("src");
        std::fs::create_dir_all(&src)?;
        let sources = (0..GRAPH_KERNELS)
            .map(|i| {
                let path = src.join(format!("add_{i}.cu"));
                std::fs::write(&path, super::source(i)).map(|_| path)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let out = root.join("out");
        std::fs::create_dir_all(&out)?;
        Ok(SourceTree { sources, out })
    }

    pub fn cubin(&self, i: usize) -> PathBuf {
        self.out.join(format!("add_{i}.cubin"))
    }

    /// Empties the output directory, so each pass must write every cubin itself.
    fn clear(&self) -> Result<()> {
        std::fs::remove_dir_all(&self.out)?;
        std::fs::create_dir_all(&self.out)?;
        Ok(())
    }

    /// Runs `make(i)` for every file with `jobs` processes at a time, like `make -j`, and returns
    /// the wall time of the whole pass. `check(i, stdout)` validates each process's output.
    pub fn pass(
        &self,
        jobs: usize,
        make: &(dyn Fn(usize) -> Command + Sync),
        check: &(dyn Fn(usize, &str) -> Result<()> + Sync),
    ) -> Result<Duration> {
        self.clear()?;
        let start = Instant::now();
        let results = work_queue::run(self.sources.len(), jobs, |i| {
            let out = make(i).output()?;
            ensure!(out.status.success(), "add_{i}: {}", String::from_utf8_lossy(&out.stderr).trim());
            check(i, &String::from_utf8_lossy(&out.stdout))
        });
        let elapsed = start.elapsed();
        results.into_iter().collect::<Result<()>>()?;
        self.check_cubins()?;
        Ok(elapsed)
    }

    fn check_cubins(&self) -> Result<()> {
        for i in 0..self.sources.len() {
            let bytes = std::fs::read(self.cubin(i)).with_context(|| format!("no cubin for add_{i}"))?;
            ensure!(bytes.starts_with(b"\x7fELF"), "add_{i}.cubin is not an ELF file");
        }
        Ok(())
    }
}

/// For passes whose processes say nothing worth checking; their cubins are still checked.
pub fn no_check(_: usize, _: &str) -> Result<()> {
    Ok(())
}

/// The median of `passes` passes.
pub fn median_pass(passes: usize, mut one: impl FnMut() -> Result<Duration>) -> Result<(Duration, Vec<Duration>)> {
    let mut times = (0..passes.max(1)).map(|_| one()).collect::<Result<Vec<_>>>()?;
    let all = times.clone();
    times.sort_unstable();
    Ok((times[times.len() / 2], all))
}
