//! `kiln audit`: has the daemon recompile a graph's kernels and compare each with what the
//! fleet holds under its key (quarantining what differs), or lists the fleet's quarantine
//! records or conflicting writes. Exit 0 when every kernel audited clean (or the fleet holds none), 1 when one
//! differs or could not be checked, 2 on an error.

use super::{load_graph_named, name_files};
use crate::cli::AuditArgs;
use crate::output::audit::{conflict_text, record_text, result_text};
use crate::report::print_line;
use anyhow::Context;
use kiln_client::pb;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let client = kiln_client::connect(daemon).await?;
    let now_ms = crate::output::snapshot::now_ms().max(0) as u64;
    if args.quarantined || args.conflicts {
        let mut since_ms = 0;
        loop {
            let request = pb::QuarantineListRequest { since_ms, limit: 0, conflicts: args.conflicts };
            let answer = client.grpc().list_quarantine(request).await.map_err(kiln_client::ClientError::from)?;
            let answer = answer.into_inner();
            let mut lines = Vec::new();
            let text = |r: &pb::QuarantineRecord| record_text(r, now_ms);
            listed(&mut lines, &mut since_ms, &answer.records, |r| r.unix_ms, text, args.json)?;
            let text = |c: &pb::ConflictRecord| conflict_text(c, now_ms);
            listed(&mut lines, &mut since_ms, &answer.conflicts, |c| c.unix_ms, text, args.json)?;
            for line in &lines {
                print_line(line)?;
            }
            if !answer.more || lines.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let (graph, names) = load_graph_named(&args.graph)?;
    let request = pb::AuditRequest {
        graph: Some(graph),
        publisher: args.publisher.clone().unwrap_or_default(),
        report_only: args.report_only,
    };
    let mut stream = client
        .grpc()
        .audit(request)
        .await
        .map_err(|e| name_files(&names, kiln_client::ClientError::from(e).into()))?
        .into_inner();
    let mut all_clean = true;
    while let Some(result) = stream.message().await.map_err(kiln_client::ClientError::from)? {
        all_clean &= matches!(result.verdict.as_str(), "clean" | "absent" | "skipped");
        let line = if args.json {
            serde_json::to_string(&result).context("encoding an audit result as JSON")?
        } else {
            result_text(&result, now_ms)
        };
        print_line(&line)?;
    }
    Ok(if all_clean { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Adds a line per record of a listing (JSON, or `text`) to `lines`, and moves `since_ms` past
/// each record's time, so the next page starts after them.
fn listed<T: serde::Serialize>(
    lines: &mut Vec<String>,
    since_ms: &mut u64,
    records: &[T],
    unix_ms: impl Fn(&T) -> u64,
    text: impl Fn(&T) -> String,
    json: bool,
) -> anyhow::Result<()> {
    for record in records {
        *since_ms = (*since_ms).max(unix_ms(record) + 1);
        lines.push(if json {
            serde_json::to_string(record).context("encoding a listed record as JSON")?
        } else {
            text(record)
        });
    }
    Ok(())
}
