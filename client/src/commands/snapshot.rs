//! `kiln snapshot save|restore|list|show`: parse nothing, call [`kiln_client::snapshot`], print
//! through `output::snapshot`. Exit codes: 0 done, 1 no snapshot (restore, show), 2 errors.

use crate::cli::{SnapshotCommand, SnapshotListArgs, SnapshotRestoreArgs, SnapshotSaveArgs, SnapshotShowArgs};
use crate::output::snapshot as out;
use crate::progress::TransferBar;
use crate::report::print_line;
use kiln_client::snapshot::{self, RestoreOutcome, SnapshotId};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Exit code when there is no snapshot for this host.
const EXIT_NOT_FOUND: u8 = 1;

pub async fn run(daemon: &str, command: SnapshotCommand) -> anyhow::Result<ExitCode> {
    match command {
        SnapshotCommand::Save(args) => save(daemon, args).await,
        SnapshotCommand::Restore(args) => restore(daemon, args).await,
        SnapshotCommand::List(args) => list(daemon, args).await,
        SnapshotCommand::Show(args) => show(daemon, args).await,
    }
}

async fn save(daemon: &str, args: SnapshotSaveArgs) -> anyhow::Result<ExitCode> {
    let id = args.id.id()?;
    let client = kiln_client::connect(daemon).await?;
    let report = TransferBar::around(!args.json, |bar| snapshot::save(&client, &id, &args.roots, bar)).await?;
    print_line(&if args.json { out::save_json(&report).to_string() } else { out::save_text(&report) })?;
    Ok(ExitCode::SUCCESS)
}

async fn restore(daemon: &str, args: SnapshotRestoreArgs) -> anyhow::Result<ExitCode> {
    let id = args.id.id()?;
    let client = kiln_client::connect(daemon).await?;
    let restored = TransferBar::around(!args.json, |bar| snapshot::restore(&client, &id, &args.roots, bar)).await;
    let report = match restored? {
        RestoreOutcome::NotFound { host_environment } => return not_found(&id, &host_environment, args.json),
        RestoreOutcome::Restored(report) => report,
    };
    for warning in out::restore_warnings(&report) {
        eprintln!("warning: {warning}");
    }
    if args.json {
        for root in &report.roots {
            print_line(&out::root_json(root).to_string())?;
        }
        print_line(&out::restore_json(&report).to_string())?;
    } else {
        print_line(&out::restore_text(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Says what was looked for, and exits 1.
fn not_found(id: &SnapshotId, host_environment: &BTreeMap<String, String>, json: bool) -> anyhow::Result<ExitCode> {
    let line = if json {
        out::not_found_json(id, host_environment).to_string()
    } else {
        out::not_found_text(id, host_environment)
    };
    print_line(&line)?;
    Ok(ExitCode::from(EXIT_NOT_FOUND))
}

async fn list(daemon: &str, args: SnapshotListArgs) -> anyhow::Result<ExitCode> {
    let client = kiln_client::connect(daemon).await?;
    let snapshots = snapshot::list(&client, args.job.as_deref().unwrap_or("")).await?;
    if args.json {
        for s in &snapshots {
            print_line(&out::summary_json(s).to_string())?;
        }
        print_line(&serde_json::json!({ "event": "listed", "snapshots": snapshots.len() }).to_string())?;
    } else if snapshots.is_empty() {
        print_line("no snapshots")?;
    } else {
        let now = out::now_ms();
        for s in &snapshots {
            print_line(&out::summary_text(s, now))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(daemon: &str, args: SnapshotShowArgs) -> anyhow::Result<ExitCode> {
    let id = args.id.id()?;
    let client = kiln_client::connect(daemon).await?;
    let response = snapshot::show(&client, &id).await?;
    let host_environment: BTreeMap<String, String> = response.host_environment.into_iter().collect();
    let Some(manifest) = response.manifest.filter(|_| response.found) else {
        return not_found(&id, &host_environment, args.json);
    };
    let summary = kiln_proto::pb::SnapshotSummary::from(&manifest);
    if args.json {
        for file in &manifest.files {
            print_line(&out::file_json(file).to_string())?;
        }
        let mut last = out::summary_json(&summary);
        last["event"] = "manifest".into();
        print_line(&last.to_string())?;
    } else {
        print_line(&out::summary_text(&summary, out::now_ms()))?;
        for file in &manifest.files {
            print_line(&format!("    {}", out::file_text(file)))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
