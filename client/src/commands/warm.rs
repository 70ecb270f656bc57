//! `kiln warm`: asks the daemon to pull graphs from the fleet cache into its local tiers, with a
//! progress bar on a terminal. Exit 0 when every kernel is local afterwards, 1 when some were
//! missing from the fleet cache or a graph key had no manifest.

use crate::cli::WarmArgs;
use crate::progress::Progress;
use crate::report::print_line;
use anyhow::Context;
use kiln_client::pb;
use serde_json::{Value, json};
use std::process::ExitCode;

/// Reads graph and kernel keys from a manifest file: a JSON object or NDJSON lines, of which
/// those with `graph_key` and `kernel_keys` count.
pub fn read_manifest(text: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut graphs = Vec::new();
    let mut kernels = Vec::new();
    let values: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(v) => vec![v],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .context("a manifest is JSON or NDJSON")?,
    };
    for v in values {
        if let Some(g) = v.get("graph_key").and_then(Value::as_str) {
            graphs.push(g.to_string());
            let keys = v.get("kernel_keys").and_then(Value::as_array).into_iter().flatten();
            kernels.extend(keys.filter_map(Value::as_str).map(String::from));
        }
    }
    anyhow::ensure!(!graphs.is_empty(), "no line with a graph_key");
    Ok((graphs, kernels))
}

pub async fn run(daemon: &str, args: WarmArgs) -> anyhow::Result<ExitCode> {
    let mut request = pb::WarmRequest { graph_keys: args.graph_keys.clone(), kernel_keys: Vec::new() };
    for path in &args.manifests {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        // The manifest lists its kernels, so they warm even where the fleet has no manifest.
        let (_, kernels) = read_manifest(&text).with_context(|| format!("reading the manifest {}", path.display()))?;
        request.kernel_keys.extend(kernels);
    }
    let client = kiln_client::connect(daemon).await?;
    let mut stream = client.warm(request).await?;
    let mut bar = Progress::default();
    let mut last = pb::WarmProgress::default();
    while let Some(progress) = stream.message().await.map_err(kiln_client::ClientError::from)? {
        bar.set(u64::from(progress.done), u64::from(progress.total));
        if args.json {
            bar.suspend(|| print_line(&progress_json(&progress).to_string()))?;
        }
        last = progress;
    }
    bar.finish();
    if !args.json {
        print_line(&format!(
            "{} kernels: {} fetched, {} already local, {} missing{}",
            last.total,
            last.fetched,
            last.already_local,
            last.missing,
            if last.unknown_graphs.is_empty() {
                String::new()
            } else {
                format!("; no manifest for {}", last.unknown_graphs.join(", "))
            }
        ))?;
    }
    let complete = last.finished && last.missing == 0 && last.unknown_graphs.is_empty();
    Ok(if complete { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn progress_json(p: &pb::WarmProgress) -> Value {
    json!({
        "total": p.total, "done": p.done, "fetched": p.fetched, "already_local": p.already_local,
        "missing": p.missing, "unknown_graphs": p.unknown_graphs, "finished": p.finished,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_come_from_compile_json_output() {
        let ndjson = "{\"id\":\"a\",\"key\":\"k1\"}\n{\"graph_key\":\"g\",\"kernel_keys\":[\"k1\",\"k2\"]}\n";
        let (graphs, kernels) = read_manifest(ndjson).unwrap();
        assert_eq!(graphs, ["g"]);
        assert_eq!(kernels, ["k1", "k2"]);
        assert!(read_manifest("{\"id\":\"a\"}").is_err());
    }
}
