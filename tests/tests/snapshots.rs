//! Job snapshots end to end: the real `kiln snapshot` CLI against real kilnd "hosts" (each its
//! own socket and cache directory) and, for the fleet cases, a real kiln-cache over a real
//! redis-server. What a restore wrote is checked on disk, byte for byte and mode for mode.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::key::snapshot_file_key;
use kiln_tests::daemon::{Daemon, Options};
use kiln_tests::env;
use kiln_tests::http::sample;
use kiln_tests::redis::{CacheServer, RedisServer, WRITE_TOKEN, fleet};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A kilnd "host" of the fleet with this default target (its `host.target`: there is no GPU).
fn host(cache: &CacheServer, target: &str) -> Daemon {
    let mut options = Daemon::fleet_options(&cache.uri(), WRITE_TOKEN, "");
    options.target = Some(target.into());
    Daemon::start(options)
}

/// A fleet (a Redis and a kiln-cache) with a host for each of `targets`.
fn fleet_hosts<const N: usize>(targets: [&str; N]) -> (RedisServer, CacheServer, [Daemon; N]) {
    let (redis, cache) = fleet();
    let hosts = targets.map(|target| host(&cache, target));
    (redis, cache, hosts)
}

/// `kiln ARGS` against `d`, not yet run.
fn kiln_command(d: &Daemon, args: &[&str]) -> Command {
    let mut cmd = Command::new(env::binary("kiln"));
    cmd.env("KILN_DAEMON", d.uri()).args(args).stdin(Stdio::null());
    cmd
}

/// A finished `kiln` run: exit code, stdout (NDJSON with `--json`) and stderr.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: std::process::Output) -> Run {
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        Run { code: out.status.code(), stdout: text(out.stdout), stderr: text(out.stderr) }
    }

    /// The NDJSON lines; every line must be one.
    fn lines(&self) -> Vec<Value> {
        let parse = |l: &str| serde_json::from_str(l).unwrap_or_else(|e| panic!("not NDJSON ({e}): {l}\n{self:?}"));
        self.stdout.lines().map(parse).collect()
    }

    /// The result line.
    fn last(&self) -> Value {
        self.lines().pop().unwrap_or_else(|| panic!("no output: {self:?}"))
    }

    /// Asserts exit code 0 and returns the result line.
    fn ok(&self) -> Value {
        assert_eq!(self.code, Some(0), "{self:?}");
        self.last()
    }

    fn count(&self, field: &str) -> u64 {
        let last = self.last();
        last[field].as_u64().unwrap_or_else(|| panic!("no count `{field}` in {last}"))
    }
}

fn kiln(d: &Daemon, args: &[&str]) -> Run {
    Run::of(kiln_command(d, args).output().expect("run kiln"))
}

fn save(d: &Daemon, job: &str, dirs: &[&Path]) -> Run {
    let mut args = vec!["snapshot", "save", "--json", "--job", job];
    args.extend(dirs.iter().map(|p| p.to_str().unwrap()));
    kiln(d, &args)
}

/// Restores `job`: to the recorded paths with no `roots`, else each `(name, dir)` given.
fn restore(d: &Daemon, job: &str, roots: &[(&str, &Path)]) -> Run {
    let roots: Vec<String> = roots.iter().map(|(name, dir)| format!("{name}={}", dir.display())).collect();
    let mut args = vec!["snapshot", "restore", "--json", "--job", job];
    args.extend(roots.iter().map(String::as_str));
    kiln(d, &args)
}

/// Writes `(path, bytes, mode)` files under `root`, making directories as needed.
fn write_files(root: &Path, files: &[(&str, &[u8], u32)]) {
    for (rel, data, mode) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
}

/// A fresh directory holding the snapshot root `name`, with `files` written under it as
/// [`write_files`] does; the directory goes when the returned `TempDir` drops.
fn root_with(name: &str, files: &[(&str, &[u8], u32)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(name);
    write_files(&root, files);
    (dir, root)
}

/// Every file under `root` but kiln's own hidden names: relative path and full path.
fn files_under(root: &Path) -> Vec<(String, std::path::PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name().to_string_lossy().starts_with(".kiln-") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                out.push((entry.path().strip_prefix(root).unwrap().to_string_lossy().into_owned(), entry.path()));
            }
        }
    }
    out
}

/// Every file under `root` but kiln's own hidden names: relative path -> (bytes, mode).
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mode = |p: &Path| p.symlink_metadata().unwrap().permissions().mode() & 0o777;
    files_under(root).into_iter().map(|(rel, path)| (rel, (std::fs::read(&path).unwrap(), mode(&path)))).collect()
}

/// `n` bytes that differ for every `seed`.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    blake3::Hasher::new().update(&seed.to_le_bytes()).finalize_xof().fill(&mut out);
    out
}

/// The names in `dir` that start with `.kiln-restore-`: staging left behind.
fn staging_dirs(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|n| n.starts_with(".kiln-restore-")).collect()
}

/// The counts of `snapshots` in `kiln stats --json` (kiln.v1.SnapshotStats, proto3 JSON names).
const SNAPSHOT_STATS: [&str; 9] = [
    "savesChanged",
    "savesUnchanged",
    "restoresFound",
    "restoresMissing",
    "filesFetched",
    "filesPresent",
    "filesMissing",
    "bytesFetched",
    "bytesStored",
];

/// `kiln stats --json` of `d`: every count of its `snapshots` object (proto3 JSON: counts as
/// strings, zero counts left out, so an absent one reads 0).
fn snapshot_stats(d: &Daemon) -> BTreeMap<String, u64> {
    let run = kiln(d, &["stats", "--json"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let stats: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {run:?}"));
    let snapshots = stats["snapshots"].as_object().unwrap_or_else(|| panic!("no snapshots in {stats}"));
    for name in snapshots.keys() {
        assert!(SNAPSHOT_STATS.contains(&name.as_str()), "unexpected snapshot stat {name} in {stats}");
    }
    let count = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a count: {v}"));
    SNAPSHOT_STATS.iter().map(|n| (n.to_string(), snapshots.get(*n).map_or(0, count))).collect()
}

/// [`snapshot_stats`] as it should read: these counts, every other 0.
fn snapshot_counts(nonzero: &[(&str, u64)]) -> BTreeMap<String, u64> {
    let mut all: BTreeMap<String, u64> = SNAPSHOT_STATS.iter().map(|n| (n.to_string(), 0)).collect();
    all.extend(nonzero.iter().map(|(k, v)| (k.to_string(), *v)));
    all
}

fn metric(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or(0.0)
}

#[test]
fn a_fresh_host_restores_byte_identical_files_with_modes_through_the_fleet() {
    let (_redis, cache, [a, b]) = fleet_hosts(["sm_90", "sm_90"]);
    let (dir, root) = root_with(
        "triton",
        &[
            ("kernel.py", b"import triton\n", 0o644),
            ("bin/launcher.so", &bytes(1, 300_000), 0o755),
            ("secret", b"only mine", 0o600),
            ("ab/cd/kernel.cubin", &bytes(2, 5_000_000), 0o640),
            ("empty", b"", 0o444),
            ("same-1", b"shared bytes", 0o644),
            ("same-2", b"shared bytes", 0o700),
        ],
    );
    let saved = tree(&root);
    // A link is not saved, and the save says so rather than dropping it without a word.
    std::os::unix::fs::symlink(root.join("kernel.py"), root.join("link.py")).unwrap();
    let first = save(&a, "fresh-host", &[&root]);
    let line = first.ok();
    assert_eq!(line["symlinks"], 1, "{first:?}");
    let said = kiln(&a, &["snapshot", "save", "--job", "fresh-host", root.to_str().unwrap()]);
    assert!(said.stdout.contains("left out 1 symbolic link (snapshots hold regular files only)"), "{said:?}");
    std::fs::remove_file(root.join("link.py")).unwrap();
    assert_eq!((first.count("files"), first.count("files_uploaded")), (7, 6), "one upload per distinct content");
    assert_eq!(line["changed"], true);
    assert_eq!(line["key"].as_str().unwrap().len(), 64);
    let again = save(&a, "fresh-host", &[&root]);
    assert_eq!(again.ok()["changed"], false, "{again:?}");
    assert_eq!((again.count("files_uploaded"), again.count("bytes_uploaded")), (0, 0), "an unchanged save sent data");

    // Host B has the same default path with nothing in it, as a real fresh host does.
    std::fs::remove_dir_all(&root).unwrap();
    let batch_gets = || metric(&cache.metrics_text(), "kiln_server_requests_total{op=\"BatchGet\",code=\"ok\"}");
    let before = batch_gets();
    let restored = restore(&b, "fresh-host", &[]);
    let line = restored.ok();
    assert_eq!((restored.count("restored_files"), restored.count("present"), restored.count("missing")), (7, 0, 0));
    assert_eq!(restored.count("restored_bytes"), saved.values().map(|(d, _)| d.len() as u64).sum::<u64>());
    assert_eq!(line["relocated"], serde_json::json!([]), "restored at its recorded path");
    assert_eq!(restored.lines()[0]["placement"], "renamed", "an absent root arrives in one rename");
    assert_eq!(tree(&root), saved, "bytes or modes differ after the restore");
    assert!(batch_gets() > before, "host B did not read from kiln-cache");
    assert!(staging_dirs(dir.path()).is_empty());

    // `kiln stats` of each host counts what it did: A saved three times and stored each distinct
    // content once; B found the snapshot and sent each distinct content once.
    let distinct: BTreeSet<&[u8]> = saved.values().map(|(d, _)| d.as_slice()).collect();
    let distinct_bytes: u64 = distinct.iter().map(|d| d.len() as u64).sum();
    let on_a = snapshot_counts(&[("savesChanged", 1), ("savesUnchanged", 2), ("bytesStored", distinct_bytes)]);
    assert_eq!(snapshot_stats(&a), on_a);
    let fetched = distinct.len() as u64;
    let on_b = snapshot_counts(&[("restoresFound", 1), ("filesFetched", fetched), ("bytesFetched", distinct_bytes)]);
    assert_eq!(snapshot_stats(&b), on_b);
    let text = kiln(&b, &["stats"]);
    assert_eq!(text.code, Some(0), "{text:?}");
    for needle in ["1 restore (1 found, 0 with no snapshot for this host)", "snapshot files  6 fetched ("] {
        assert!(text.stdout.contains(needle), "missing {needle:?} in\n{}", text.stdout);
    }

    // A restore keeps no copy of the files in B's tiers (the directory is the copy; a disk-tier
    // write and fsync per file would compete with the job starting), only the manifest; yet B's
    // save after it sends nothing: the fleet holds every file.
    let disk_writes = metric(&b.metrics_text(), "kiln_cache_writes_total{tier=\"disk\",result=\"ok\"}");
    assert!(disk_writes <= 1.0, "B wrote {disk_writes} entries to its disk tier: more than the manifest");
    let from_b = save(&b, "fresh-host", &[&root]);
    assert_eq!(from_b.ok()["changed"], false, "{from_b:?}");
    assert_eq!((from_b.count("files_uploaded"), from_b.count("bytes_uploaded")), (0, 0), "B re-sent restored files");
}

#[test]
fn a_snapshot_saved_without_a_fleet_reaches_it_on_the_next_save() {
    let (_redis, cache) = fleet();
    let (dir, root) = root_with("triton", &[("a.cubin", &bytes(7, 10_000), 0o644), ("b/c.json", b"{}", 0o600)]);
    let saved = tree(&root);
    // Host A saves while it has no fleet, then comes back with one and saves again: nothing
    // changed here, yet the fleet gets the snapshot.
    let home = dir.path().join("host-a");
    std::fs::create_dir_all(&home).unwrap();
    let alone = Daemon::start_in(&home, Options::default());
    assert_eq!(save(&alone, "late-fleet", &[&root]).ok()["changed"], true);
    alone.stop();
    let a = Daemon::start_in(&home, Daemon::fleet_options(&cache.uri(), WRITE_TOKEN, ""));
    let again = save(&a, "late-fleet", &[&root]);
    assert_eq!(again.ok()["changed"], false, "{again:?}");
    // The files go back to the fleet in the background: wait for them, as a restore elsewhere
    // would find them there.
    std::fs::remove_dir_all(&root).unwrap();
    let b = host(&cache, "sm_90");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let restored = restore(&b, "late-fleet", &[]);
        if restored.code == Some(0) && restored.count("missing") == 0 {
            assert_eq!(restored.count("restored_files"), 2, "{restored:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the fleet never got the snapshot: {restored:?}");
        let _ = std::fs::remove_dir_all(&root);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(tree(&root), saved);
    a.stop();
    b.stop();
}

#[test]
fn saves_are_a_union_and_a_restore_never_overwrites() {
    let d = Daemon::start(Options::default());
    let (dir, root) = root_with("cache", &[("a", b"a1", 0o644), ("sub/b", b"b1", 0o644)]);
    save(&d, "union", &[&root]).ok();
    std::fs::remove_file(root.join("a")).unwrap();
    write_files(&root, &[("sub/b", b"b2", 0o644), ("c", b"c1", 0o755)]);
    let second = save(&d, "union", &[&root]);
    assert_eq!(second.ok()["changed"], true);
    assert_eq!((second.count("files"), second.count("files_added"), second.count("manifest_files")), (2, 2, 3));

    // Elsewhere: every file of both saves, the newer content of a path given again.
    let other = dir.path().join("elsewhere");
    let run = restore(&d, "union", &[("cache", &other)]);
    assert_eq!(run.count("restored_files"), 3, "{run:?}");
    let want: BTreeMap<String, (Vec<u8>, u32)> = [
        ("a".to_string(), (b"a1".to_vec(), 0o644)),
        ("c".to_string(), (b"c1".to_vec(), 0o755)),
        ("sub/b".to_string(), (b"b2".to_vec(), 0o644)),
    ]
    .into();
    assert_eq!(tree(&other), want);
    // Restored elsewhere: reported, as a JIT cache there is slow.
    assert_eq!(run.last()["relocated"], serde_json::json!(["cache"]));
    assert_eq!(run.lines()[0]["relocated"], true);
    assert_eq!(run.lines()[0]["recorded_path"], root.to_str().unwrap());
    assert!(run.stderr.contains("not where it was saved"), "{}", run.stderr);

    // Into a directory that has some of the files: present ones are skipped, a differing one is
    // never overwritten, the rest is linked in.
    let mixed = dir.path().join("mixed");
    write_files(&mixed, &[("a", b"mine, not the snapshot's", 0o600), ("c", b"c1", 0o755)]);
    let run = restore(&d, "union", &[("cache", &mixed)]);
    assert_eq!((run.count("restored_files"), run.count("present"), run.count("missing")), (1, 2, 0), "{run:?}");
    assert_eq!(run.lines()[0]["placement"], "linked");
    let mut expected = want.clone();
    expected.insert("a".into(), (b"mine, not the snapshot's".to_vec(), 0o600));
    assert_eq!(tree(&mixed), expected);
    let run = restore(&d, "union", &[("cache", &mixed)]);
    assert_eq!((run.count("restored_files"), run.count("present")), (0, 3));
}

#[test]
fn a_restore_that_would_restore_nothing_exits_2_naming_the_roots() {
    let d = Daemon::start(Options::default());
    let (dir, root) = root_with("cache", &[("a", b"a1", 0o644)]);
    save(&d, "one-root", &[&root]).ok();

    // A name the snapshot lacks: exit 2, the snapshot's roots named, nothing written.
    let elsewhere = dir.path().join("elsewhere");
    let run = restore(&d, "one-root", &[("other", &elsewhere)]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("no root `other`"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("`cache` (saved at {})", root.display())), "{}", run.stderr);
    assert!(!elsewhere.exists() && staging_dirs(dir.path()).is_empty());

    // A single bare DIR for a one-root snapshot is where that root goes, whatever it is called.
    let bare = dir.path().join("some-dir");
    let run = kiln(&d, &["snapshot", "restore", "--json", "--job", "one-root", bare.to_str().unwrap()]);
    assert_eq!(run.count("restored_files"), 1, "{run:?}");
    assert_eq!(tree(&bare), BTreeMap::from([("a".to_string(), (b"a1".to_vec(), 0o644))]));
}

/// Starts `kiln snapshot restore` into `target`, waits until its staging directory holds
/// `files` files, and kills it with SIGKILL; asserts the kill landed mid-restore.
fn kill_mid_restore(d: &Daemon, job: &str, target: &Path, files: usize) {
    let mut child: Child = kiln_command(d, &["snapshot", "restore", "--json", "--job", job, target.to_str().unwrap()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let base = target.file_name().unwrap().to_string_lossy();
    let staging = target.with_file_name(format!(".kiln-restore-{base}-{}", child.id()));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !staging.is_dir() || files_under(&staging).len() < files {
        assert!(child.try_wait().unwrap().is_none(), "the restore finished before it could be killed");
        assert!(Instant::now() < deadline, "the restore never staged {files} files");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(staging.is_dir(), "the killed restore's staging is gone: it was not killed mid-restore");
}

#[test]
fn a_restore_killed_mid_write_leaves_only_whole_files_and_the_next_one_completes() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    // Many files, each written and fsynced on its own: slow enough to kill in the middle.
    let files: Vec<(String, Vec<u8>)> = (0..4000).map(|i| (format!("d{}/f{i}", i % 50), bytes(i, 4096))).collect();
    let specs: Vec<(&str, &[u8], u32)> = files.iter().map(|(p, b)| (p.as_str(), b.as_slice(), 0o644)).collect();
    write_files(&source, &specs);
    save(&d, "torn", &[&source]).ok();
    let mut saved = tree(&source);

    // An absent target: the kill leaves nothing of it (it arrives whole or not at all).
    let absent = dir.path().join("absent/source");
    kill_mid_restore(&d, "torn", &absent, 100);
    assert!(!absent.exists(), "a killed restore left a partial root");
    // A target with a file of its own: the kill leaves it as it was.
    let existing = dir.path().join("existing/source");
    write_files(&existing, &[("own", b"own", 0o600)]);
    kill_mid_restore(&d, "torn", &existing, 100);
    let own: BTreeMap<String, (Vec<u8>, u32)> = [("own".to_string(), (b"own".to_vec(), 0o600))].into();
    assert_eq!(tree(&existing), own, "a killed restore changed the target");

    let run = restore(&d, "torn", &[("source", &absent)]);
    assert_eq!((run.count("restored_files"), run.count("present")), (4000, 0), "{run:?}");
    assert_eq!(tree(&absent), saved);
    let run = restore(&d, "torn", &[("source", &existing)]);
    assert_eq!((run.count("restored_files"), run.count("present")), (4000, 0), "{run:?}");
    saved.extend(own);
    assert_eq!(tree(&existing), saved);
    for parent in [dir.path().join("absent"), dir.path().join("existing")] {
        assert!(staging_dirs(&parent).is_empty(), "stale staging left in {}", parent.display());
    }
}

#[test]
fn a_corrupted_file_in_redis_is_refused_never_written_reported_missing_and_put_back_by_its_holder() {
    let (redis, cache, [a, b]) = fleet_hosts(["sm_90", "sm_90"]);
    let bad = bytes(7, 200_000);
    let (dir, root) =
        root_with("inductor", &[("good-1", b"good one", 0o644), ("bad", &bad, 0o644), ("good-2", b"good two", 0o644)]);
    save(&a, "poisoned", &[&root]).ok();

    // Flip one byte in the middle of the stored value of `bad`.
    let head = format!("kiln:v1:{{{}}}:a", snapshot_file_key(blake3::hash(&bad).as_bytes()));
    let len: usize = String::from_utf8_lossy(&redis.cli(&["STRLEN", &head])).trim().parse().unwrap();
    assert!(len > 1000, "{head} holds {len} bytes: not the file's value");
    let middle = (len / 2).to_string();
    let byte = redis.cli(&["GETRANGE", &head, &middle, &middle]);
    redis.cli(&["SETRANGE", &head, &middle, if byte == b"A" { "B" } else { "A" }]);

    let target = dir.path().join("on-b");
    let run = restore(&b, "poisoned", &[("inductor", &target)]);
    assert_eq!((run.count("restored_files"), run.count("missing")), (2, 1), "{run:?}");
    assert!(run.stderr.contains("1 file of the snapshot could not be fetched intact"), "{}", run.stderr);
    let names: Vec<String> = tree(&target).into_keys().collect();
    assert_eq!(names, ["good-1", "good-2"], "the damaged file reached the disk");
    let detected = metric(&cache.metrics_text(), "kiln_server_integrity_failures_total")
        + metric(&b.metrics_text(), "kiln_integrity_failures_total{tier=\"remote\"}");
    assert!(detected >= 1.0, "the damaged value was not counted");

    // kiln-cache deleted the damaged value. Host A still holds the file: its next save sends
    // nothing (A has it) but puts it back in the fleet, and a third host restores everything.
    assert_eq!(redis.cli(&["EXISTS", &head]), b"0", "kiln-cache kept a damaged value");
    save(&a, "poisoned", &[&root]).ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while redis.cli(&["EXISTS", &head]) != b"1" {
        assert!(std::time::Instant::now() < deadline, "host A never put the lost file back in the fleet");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let c = host(&cache, "sm_90");
    let target = dir.path().join("on-c");
    let run = restore(&c, "poisoned", &[("inductor", &target)]);
    assert_eq!((run.count("restored_files"), run.count("missing")), (3, 0), "{run:?}");
    assert_eq!(tree(&target), tree(&root));
}

#[test]
fn a_snapshot_over_max_snapshot_mb_is_refused_with_a_clear_error() {
    let d = Daemon::start(Options { config: "max_snapshot_mb = 1\n".into(), ..Options::default() });
    let (_dir, root) = root_with("big", &[("a", &bytes(1, 1 << 20), 0o644), ("b", &bytes(2, 1 << 20), 0o644)]);
    let out = kiln_command(&d, &["snapshot", "save", "--job", "big", root.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: resource exhausted: "), "{stderr}");
    assert!(stderr.contains("max_snapshot_mb") && stderr.contains("nothing was saved"), "{stderr}");
    let show = kiln(&d, &["snapshot", "show", "--json", "--job", "big"]);
    assert_eq!(show.code, Some(1), "a refused snapshot was stored: {show:?}");
    assert_eq!(show.last()["event"], "not_found");
}

#[test]
fn eight_restores_racing_on_one_host_fetch_once() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    let files: Vec<(String, Vec<u8>)> = (0..200).map(|i| (format!("f{i}"), bytes(i, 8192))).collect();
    let specs: Vec<(&str, &[u8], u32)> = files.iter().map(|(p, b)| (p.as_str(), b.as_slice(), 0o644)).collect();
    write_files(&source, &specs);
    save(&d, "race", &[&source]).ok();

    let target = dir.path().join("ranks/cache");
    let root = format!("source={}", target.display());
    let args = ["snapshot", "restore", "--json", "--job", "race", &root];
    let children: Vec<Child> = (0..8)
        .map(|_| kiln_command(&d, &args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    let runs: Vec<Run> = children.into_iter().map(|c| Run::of(c.wait_with_output().unwrap())).collect();
    let mut fetched = 0;
    for run in &runs {
        run.ok();
        match (run.count("restored_files"), run.count("present")) {
            (200, 0) => fetched += 1,
            (0, 200) => {}
            other => panic!("a rank restored part of the snapshot: {other:?}"),
        }
    }
    assert_eq!(fetched, 1, "{runs:?}");
    assert_eq!(tree(&target), tree(&source));
}

#[test]
fn a_snapshot_for_another_gpu_target_is_never_restored() {
    let (_redis, cache, [sm80, sm90]) = fleet_hosts(["sm_80", "sm_90"]);
    let (dir, root) = root_with("triton", &[("k.cubin", b"sm_80 code", 0o644)]);
    let saved = save(&sm80, "gpu", &[&root]);
    assert_eq!(saved.ok()["changed"], true);

    let target = dir.path().join("on-sm90");
    let miss = restore(&sm90, "gpu", &[("triton", &target)]);
    assert_eq!(miss.code, Some(1), "{miss:?}");
    assert_eq!(miss.last()["event"], "not_found");
    assert_eq!(miss.last()["host_environment"]["host.target"], "sm_90");
    assert!(!target.exists(), "a miss created the target");
    assert_eq!(kiln(&sm90, &["snapshot", "show", "--job", "gpu"]).code, Some(1));

    // The same fleet serves it to another sm_80 host: the target alone kept sm_90 out.
    let other80 = host(&cache, "sm_80");
    let hit = restore(&other80, "gpu", &[("triton", &target)]);
    assert_eq!(hit.count("restored_files"), 1, "{hit:?}");
    assert_eq!(hit.last()["environment"]["host.target"], "sm_80");
}

/// The lines of `kiln snapshot list` and `show` for what was saved.
#[test]
fn list_and_show_describe_the_stored_snapshot() {
    let d = Daemon::start(Options::default());
    let (_dir, root) = root_with("vllm", &[("x", b"xx", 0o640)]);
    let run = kiln(&d, &["snapshot", "save", "--json", "--job", "lj", "--key", "model=llama", root.to_str().unwrap()]);
    let key = run.ok()["key"].as_str().unwrap().to_string();
    let listed = kiln(&d, &["snapshot", "list", "--json", "--job", "lj"]);
    assert_eq!(listed.ok()["snapshots"], 1);
    assert_eq!(listed.lines()[0]["key"], key.as_str());
    assert_eq!(listed.lines()[0]["environment"]["model"], "llama");
    let shown = kiln(&d, &["snapshot", "show", "--json", "--job", "lj", "--key", "model=llama"]);
    assert_eq!(shown.ok()["event"], "manifest");
    let digest = blake3::hash(b"xx").to_hex().to_string();
    assert_eq!(
        shown.lines()[0],
        serde_json::json!({"root": "vllm", "path": "x", "mode": 0o640, "digest": digest, "size": 2})
    );
    assert_eq!(kiln(&d, &["snapshot", "show", "--job", "lj"]).code, Some(1), "the key parts are part of the identity");
    let text = kiln_command(&d, &["snapshot", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains(&key), "{text:?}");
}
