//! The Triton kernels of figures (h) and (i), from examples/triton/kernels.py, as kiln requests
//! and as requests for the direct `triton.compile` baseline (`triton_direct.py`, shipped in this
//! binary and written to the scratch directory at run time).

use super::{Bench, TARGET};
use anyhow::{Context, Result, bail, ensure};
use kiln_proto::pb;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use kiln_tests::kernels::{
    TRITON_ADD as ADD, TRITON_LAYER_NORM as LAYER_NORM, TRITON_MATMUL as MATMUL, TRITON_SOFTMAX as SOFTMAX,
};

/// One kernel of a list: which function, its signature, integer constexprs and warps.
#[derive(Debug, Clone)]
pub struct TritonKernel {
    pub id: String,
    pub name: &'static str,
    pub signature: &'static [(&'static str, &'static str)],
    pub constexprs: Vec<(&'static str, i64)>,
    pub num_warps: u32,
}

fn k(
    name: &'static str,
    sig: &'static [(&'static str, &'static str)],
    c: &[(&'static str, i64)],
    w: u32,
) -> TritonKernel {
    let tag: Vec<String> = c.iter().map(|(_, v)| v.to_string()).collect();
    let id = format!("{}_{}_w{w}", name.trim_end_matches("_kernel"), tag.join("x"));
    TritonKernel { id, name, signature: sig, constexprs: c.to_vec(), num_warps: w }
}

/// 12 kernels: vector add at several BLOCK and num_warps, softmax, layer norm, and `tl.dot`
/// matmul.
pub fn twelve() -> Vec<TritonKernel> {
    let mut v: Vec<TritonKernel> = [(128, 4), (256, 4), (512, 4), (1024, 4), (1024, 8), (2048, 8)]
        .iter()
        .map(|&(b, w)| k("add_kernel", ADD, &[("BLOCK", b)], w))
        .collect();
    v.push(k("softmax_kernel", SOFTMAX, &[("BLOCK", 256)], 4));
    v.push(k("softmax_kernel", SOFTMAX, &[("BLOCK", 1024)], 4));
    v.push(k("layer_norm_kernel", LAYER_NORM, &[("BLOCK", 512)], 4));
    v.push(k("layer_norm_kernel", LAYER_NORM, &[("BLOCK", 1024)], 8));
    v.push(k("matmul_kernel", MATMUL, &[("BM", 64), ("BN", 64), ("BK", 32)], 4));
    v.push(k("matmul_kernel", MATMUL, &[("BM", 32), ("BN", 32), ("BK", 32)], 4));
    v
}

/// 32 kernels: 24 vector adds (6 BLOCK × 4 num_warps), 3 softmax, 3 layer norm, 2 matmul.
pub fn thirty_two() -> Vec<TritonKernel> {
    let mut v = Vec::new();
    for b in [128, 256, 512, 1024, 2048, 4096] {
        for w in [1, 2, 4, 8] {
            v.push(k("add_kernel", ADD, &[("BLOCK", b)], w));
        }
    }
    for (b, w) in [(256, 2), (1024, 4), (2048, 8)] {
        v.push(k("softmax_kernel", SOFTMAX, &[("BLOCK", b)], w));
        v.push(k("layer_norm_kernel", LAYER_NORM, &[("BLOCK", b)], w));
    }
    v.push(k("matmul_kernel", MATMUL, &[("BM", 64), ("BN", 64), ("BK", 32)], 4));
    v.push(k("matmul_kernel", MATMUL, &[("BM", 32), ("BN", 32), ("BK", 32)], 4));
    v
}

/// The module's text with a tag comment on top: a new tag is a new source, so a new key for
/// kiln and a new module name for the direct side; nothing cached can answer.
pub fn source(bench: &Bench, tag: &str) -> Result<String> {
    let path = bench.repo.join("examples/triton/kernels.py");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(format!("# kiln-bench {tag}\n{text}"))
}

/// One graph of `kernels`, all from `source`.
pub fn request(source: &str, kernels: &[TritonKernel]) -> pb::CompileRequest {
    let ks = kernels
        .iter()
        .map(|t| {
            let src = kiln_tests::kernels::triton(source, t.name, t.signature, &t.constexprs, t.num_warps);
            kiln_tests::kernels::any_kernel(&t.id, pb::kernel::Source::Triton(src))
        })
        .collect();
    kiln_tests::kernels::request(TARGET, ks)
}

/// The interpreter with the pinned triton: `KILN_TEST_PYTHON`, or `.venv/bin/python`.
pub fn python(bench: &Bench) -> PathBuf {
    std::env::var_os("KILN_TEST_PYTHON").map_or_else(|| bench.repo.join(".venv/bin/python"), PathBuf::from)
}

/// The long-lived Python process of the direct baseline.
#[derive(Debug)]
pub struct Direct {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Direct {
    pub fn start(bench: &Bench) -> Result<Direct> {
        let script = bench.work.join("triton_direct.py");
        std::fs::write(&script, include_str!("triton_direct.py"))?;
        let mut child = Command::new(python(bench))
            .arg(&script)
            .env("TRITON_ALWAYS_COMPILE", "1")
            .env("TRITON_CACHE_DIR", bench.dir("triton-direct-cache")?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting Python for triton_direct.py")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        Ok(Direct { child, stdin, stdout })
    }

    /// Compiles `kernels` of `source` in order; returns Python's own timing and the cubins.
    pub fn compile(&mut self, source: &str, kernels: &[TritonKernel]) -> Result<(Duration, Vec<Vec<u8>>)> {
        let ks: Vec<serde_json::Value> = kernels
            .iter()
            .map(|t| {
                let c: serde_json::Map<String, serde_json::Value> =
                    t.constexprs.iter().map(|(n, v)| ((*n).to_string(), (*v).into())).collect();
                serde_json::json!({"name": t.name, "signature": t.signature, "constexprs": c, "num_warps": t.num_warps})
            })
            .collect();
        let line = serde_json::json!({"source": source, "kernels": ks}).to_string();
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()?;
        let mut answer = String::new();
        if self.stdout.read_line(&mut answer)? == 0 {
            bail!("triton_direct.py exited (its stderr is above)");
        }
        let v: serde_json::Value = serde_json::from_str(&answer).context("triton_direct.py's answer")?;
        let secs = v["secs"].as_f64().context("no secs")?;
        let cubins = v["cubins"].as_array().context("no cubins")?;
        let cubins = cubins.iter().map(|c| unhex(c.as_str().unwrap_or(""))).collect::<Result<Vec<_>>>()?;
        ensure!(cubins.len() == kernels.len(), "{} cubins for {} kernels", cubins.len(), kernels.len());
        Ok((Duration::from_secs_f64(secs), cubins))
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    ensure!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).context("bad hex")).collect()
}

/// The cubins of a job, in the order of `kernels`, each checked ok and `compiled`.
pub fn cubins(job: &kiln_client::CompletedJob, kernels: &[TritonKernel]) -> Result<Vec<Vec<u8>>> {
    ensure!(job.kernels.len() == kernels.len(), "{} of {} results", job.kernels.len(), kernels.len());
    kernels
        .iter()
        .map(|t| {
            let r = job.kernel(&t.id).with_context(|| format!("no result for {}", t.id))?;
            ensure!(r.outcome() == pb::Outcome::Ok, "{}: {:?}: {}", t.id, r.outcome(), r.log);
            ensure!(r.tier() == pb::Tier::Compiled, "{} came from {:?}, not compiled", t.id, r.tier());
            Ok(r.artifact.to_vec())
        })
        .collect()
}

/// Each round's seconds, for a figure's notes.
pub fn secs(d: &[Duration]) -> String {
    d.iter().map(|d| format!("{:.2} s", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
}
