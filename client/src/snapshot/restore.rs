//! Restores a job's snapshot: `GetSnapshot`, a check of the whole manifest, then per root,
//! under the host lock: drop stale staging, skip the files already there, fetch the rest into
//! staging and place it. Files no tier holds are counted and skipped; the rest is restored.

use super::error::blocking;
use super::lock::HostLock;
use super::manifest::{self, CheckedRoot, FileEntry};
use super::place::{self, Placed};
use super::stage::{self, Staging};
use super::{Observer, Phase, Root, SnapshotError, SnapshotId, fetch, fsx, spec};
use crate::client::Client;
use kiln_proto::pb;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub use super::place::Placement;

/// What a restore found.
#[derive(Debug, Clone, PartialEq)]
pub enum RestoreOutcome {
    /// No snapshot of this job for this host's environment, which kilnd says it looked for.
    NotFound {
        host_environment: BTreeMap<String, String>,
    },
    Restored(RestoreReport),
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreReport {
    pub job: String,
    /// The manifest's key (64 hex characters).
    pub key: String,
    /// Every key part of the snapshot: the caller's and the host's.
    pub environment: BTreeMap<String, String>,
    pub saved_by: String,
    pub updated_unix_ms: i64,
    /// The roots restored, in manifest order.
    pub roots: Vec<RootReport>,
    /// Roots the caller named that the snapshot does not have: nothing was restored there.
    pub unknown_roots: Vec<String>,
    pub seconds: f64,
}

impl RestoreReport {
    pub fn restored_files(&self) -> u64 {
        self.roots.iter().map(|r| r.restored_files).sum()
    }
    pub fn restored_bytes(&self) -> u64 {
        self.roots.iter().map(|r| r.restored_bytes).sum()
    }
    pub fn present(&self) -> u64 {
        self.roots.iter().map(|r| r.present).sum()
    }
    pub fn missing(&self) -> u64 {
        self.roots.iter().map(|r| r.missing).sum()
    }
    /// The roots restored somewhere other than where they were saved: a JIT cache such as
    /// Inductor's is only fast at the path it was written at.
    pub fn relocated(&self) -> impl Iterator<Item = &RootReport> {
        self.roots.iter().filter(|r| r.relocated)
    }
}

/// One root's restore.
#[derive(Debug, Clone, PartialEq)]
pub struct RootReport {
    pub name: String,
    pub target: PathBuf,
    /// Where the saving host had it.
    pub recorded: String,
    pub relocated: bool,
    /// Files the manifest lists for this root.
    pub files: u64,
    pub restored_files: u64,
    pub restored_bytes: u64,
    /// Files not written because something already had their path (never overwritten).
    pub present: u64,
    /// Files whose content no tier held intact: skipped.
    pub missing: u64,
    pub placement: Placement,
}

/// Restores `id`'s snapshot: every root to its recorded path when `roots` is empty, otherwise
/// the roots named there (by name) to the paths given; manifest roots not named are left alone.
pub async fn restore(
    client: &Client,
    id: &SnapshotId,
    roots: &[Root],
    observer: Arc<dyn Observer>,
) -> Result<RestoreOutcome, SnapshotError> {
    let started = Instant::now();
    let response = super::show(client, id).await?;
    if !response.found {
        return Ok(RestoreOutcome::NotFound { host_environment: response.host_environment.into_iter().collect() });
    }
    let manifest = response.manifest.unwrap_or_default();
    let checked = manifest::check(&manifest)?;
    let Targets { plan, unknown: unknown_roots } = targets(checked, roots)?;
    let mut grpc = client.snapshots();
    let mut reports = Vec::with_capacity(plan.len());
    for (root, target) in plan {
        reports.push(restore_root(&mut grpc, root, target, observer.clone()).await?);
    }
    Ok(RestoreOutcome::Restored(report(manifest, reports, unknown_roots, started)))
}

fn report(
    manifest: pb::SnapshotManifest,
    roots: Vec<RootReport>,
    unknown_roots: Vec<String>,
    started: Instant,
) -> RestoreReport {
    RestoreReport {
        job: manifest.job,
        key: manifest.key,
        environment: manifest.environment.into_iter().collect(),
        saved_by: manifest.saved_by,
        updated_unix_ms: manifest.updated_unix_ms,
        roots,
        unknown_roots,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// The manifest roots to restore, each with its target, and the names given that the manifest
/// lacks.
#[derive(Debug)]
struct Targets {
    plan: Vec<(CheckedRoot, PathBuf)>,
    unknown: Vec<String>,
}

/// Pairs each manifest root to restore with its target. Two roots of one name, or two roots
/// onto one directory, are refused, and so is a restore that would restore nothing: roots were
/// named and the snapshot has none of them. A single bare `DIR` given for a snapshot of one
/// root is where that root goes, whatever the directory is called.
fn targets(checked: Vec<CheckedRoot>, roots: &[Root]) -> Result<Targets, SnapshotError> {
    let mut plan = Vec::new();
    let mut unknown = Vec::new();
    if roots.is_empty() {
        for root in checked {
            let target = recorded_path(&root.recorded);
            plan.push((root, target));
        }
    } else {
        let mut names = HashSet::new();
        for given in roots {
            if !names.insert(given.name.as_str()) {
                return Err(SnapshotError::Usage(format!("root `{}` is named twice", given.name)));
            }
            match checked.iter().find(|c| c.name == given.name) {
                Some(root) => plan.push((root.clone(), given.path.clone())),
                None => unknown.push(given.name.clone()),
            }
        }
        if plan.is_empty() {
            match (checked.as_slice(), roots) {
                ([only], [given]) if !given.named => {
                    plan.push((only.clone(), given.path.clone()));
                    unknown.clear();
                }
                _ => return Err(SnapshotError::Usage(nothing_to_restore(&checked, &unknown))),
            }
        }
    }
    let mut paths = HashSet::new();
    for (root, target) in &plan {
        if !paths.insert(target.clone()) {
            return Err(SnapshotError::Usage(format!(
                "root `{}` would be restored onto {}, which another root takes",
                root.name,
                target.display()
            )));
        }
    }
    Ok(Targets { plan, unknown })
}

/// Why a restore of the roots `asked` for would restore nothing, with the roots the snapshot has.
fn nothing_to_restore(checked: &[CheckedRoot], asked: &[String]) -> String {
    let asked: Vec<String> = asked.iter().map(|n| format!("`{n}`")).collect();
    let has: Vec<String> = checked.iter().map(|r| format!("`{}` (saved at {})", r.name, r.recorded)).collect();
    let has = if has.is_empty() { "none".to_string() } else { has.join(", ") };
    format!(
        "the snapshot has no root {}, so nothing would be restored; its roots: {has}. Give one as NAME=DIR, \
         or no directory to restore every root where it was saved",
        asked.join(" or ")
    )
}

async fn restore_root(
    grpc: &mut pb::snapshots_client::SnapshotsClient<crate::Transport>,
    root: CheckedRoot,
    target: PathBuf,
    observer: Arc<dyn Observer>,
) -> Result<RootReport, SnapshotError> {
    let relocated = recorded_path(&root.recorded) != target;
    let mut report = RootReport {
        name: root.name.clone(),
        target: target.clone(),
        recorded: root.recorded.clone(),
        relocated,
        files: root.files.len() as u64,
        restored_files: 0,
        restored_bytes: 0,
        present: 0,
        missing: 0,
        placement: Placement::Nothing,
    };
    let (parent, base) = parent_and_base(&target)?;
    let files = root.files;
    let prepared = {
        let target = target.clone();
        blocking(move || prepare(&parent, &base, &target, &files)).await?
    };
    report.present = prepared.present;
    let present = u32::try_from(report.present).unwrap_or(u32::MAX);
    let Some(staging) = prepared.staging else {
        drop(prepared.lock);
        fetch::report_present(grpc, present).await?;
        return Ok(report);
    };
    let needed: u64 = report.files - report.present;
    observer.phase(Phase::Fetch, needed, prepared.bytes);
    let staging = fetch::fetch(grpc, staging, present, observer).await?;
    report.missing = staging.missing_files();
    let lock = prepared.lock;
    let placed: Placed = blocking(move || {
        let placed = place::place(staging, &target);
        drop(lock);
        placed
    })
    .await?;
    report.placement = placed.placement;
    report.restored_files = placed.files;
    report.restored_bytes = placed.bytes;
    report.present += placed.taken;
    Ok(report)
}

/// A recorded path, normalized as the targets given are (it is absolute, so no working
/// directory is involved), so that only a real move counts as relocated.
fn recorded_path(recorded: &str) -> PathBuf {
    spec::absolute(Path::new(recorded)).unwrap_or_else(|_| PathBuf::from(recorded))
}

/// The target's parent (where lock and staging go) and final component.
fn parent_and_base(target: &Path) -> Result<(PathBuf, String), SnapshotError> {
    match (target.parent(), target.file_name()) {
        (Some(parent), Some(base)) => Ok((parent.to_path_buf(), base.to_string_lossy().into_owned())),
        _ => Err(SnapshotError::Usage(format!("cannot restore a root onto {}", target.display()))),
    }
}

/// A root made ready to fetch, under its lock.
#[derive(Debug)]
struct Prepared {
    lock: HostLock,
    present: u64,
    /// `None` when every file is present: nothing to fetch.
    staging: Option<Staging>,
    bytes: u64,
}

/// Takes the host lock, removes stale staging, and stages for the files not yet there.
fn prepare(parent: &Path, base: &str, target: &Path, files: &[FileEntry]) -> Result<Prepared, SnapshotError> {
    if fsx::lexists(target) && !target.is_dir() {
        return Err(SnapshotError::Usage(format!("{}: exists and is not a directory", target.display())));
    }
    std::fs::create_dir_all(parent).map_err(SnapshotError::io("creating", parent))?;
    let lock = HostLock::acquire(parent, base)?;
    stage::remove_stale(parent, base)?;
    let needed: Vec<FileEntry> = files.iter().filter(|f| !fsx::lexists(&target.join(&f.rel))).cloned().collect();
    let present = (files.len() - needed.len()) as u64;
    let bytes = needed.iter().map(|f| f.size).sum();
    let staging = if needed.is_empty() { None } else { Some(Staging::create(parent, base, &needed)?) };
    Ok(Prepared { lock, present, staging, bytes })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn root(name: &str) -> CheckedRoot {
        CheckedRoot { name: name.into(), recorded: format!("/saved/{name}"), files: Vec::new() }
    }

    fn given(arg: &str) -> Root {
        Root::parse(arg).unwrap()
    }

    fn planned(t: &Targets) -> Vec<(String, PathBuf)> {
        t.plan.iter().map(|(r, p)| (r.name.clone(), p.clone())).collect()
    }

    #[test]
    fn a_bare_dir_takes_a_single_root_whatever_its_name() {
        let t = targets(vec![root("triton")], &[given("/fresh/somewhere")]).unwrap();
        assert_eq!(planned(&t), vec![("triton".into(), PathBuf::from("/fresh/somewhere"))]);
        assert!(t.unknown.is_empty());
    }

    #[test]
    fn roots_that_match_nothing_are_an_error_naming_what_the_snapshot_has() {
        let two = || vec![root("triton"), root("inductor")];
        let err = targets(two(), &[given("/fresh/somewhere")]).unwrap_err().to_string();
        assert!(err.contains("no root `somewhere`"), "{err}");
        assert!(err.contains("`triton` (saved at /saved/triton), `inductor` (saved at /saved/inductor)"), "{err}");
        // A name given explicitly is meant: it never falls back onto the single root.
        let err = targets(vec![root("triton")], &[given("other=/fresh/x")]).unwrap_err().to_string();
        assert!(err.contains("no root `other`") && err.contains("`triton`"), "{err}");
        // Two bare directories for one root: which one is meant cannot be known.
        assert!(targets(vec![root("triton")], &[given("/a/x"), given("/b/y")]).is_err());
    }

    #[test]
    fn a_partly_known_list_restores_what_it_can_and_reports_the_rest() {
        let t = targets(vec![root("triton"), root("inductor")], &[given("/x/triton"), given("/x/vllm")]).unwrap();
        assert_eq!(planned(&t), vec![("triton".into(), PathBuf::from("/x/triton"))]);
        assert_eq!(t.unknown, vec!["vllm".to_string()]);
        let all = targets(vec![root("triton"), root("inductor")], &[]).unwrap();
        assert_eq!(all.plan.len(), 2);
    }
}
