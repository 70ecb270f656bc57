"""Job snapshots through kiln.Client against real kilnds: save and restore across two hosts of one
fleet, unchanged files never sent twice, saves that union, restores that never overwrite, a
killed restore, eight processes racing to restore one directory, the size bound,
``python -m kiln snapshot``, and each of the Python and Rust implementations restoring what the
other saved."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from blake3 import blake3
from harness import Kilnd, binary, metric

import kiln
from kiln._snapshot_place import Staging, check_path

KEYS = {"kind": "test", "tool": "1.0"}


def job() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


FILES = {
    "fxgraph/ab/entry": os.urandom(50_000),
    "triton/0/KEY/k.cubin": os.urandom(20_000),
    "triton/0/KEY/k.json": b'{"name": "k"}',
    "same-as-json": b'{"name": "k"}',
    "empty": b"",
}


def test_a_fresh_host_restores_what_another_saved_at_the_same_path(kilnd: Kilnd, kilnd_fresh: Kilnd, tmp_path: Path) -> None:
    j, cache = job(), tmp_path / "cache"
    make_tree(cache, FILES)
    (cache / "triton/0/KEY/k.cubin").chmod(0o755)
    (cache / "skipped.lock").write_bytes(b"lock")
    (cache / ".kiln-restore-cache-1").mkdir()
    (cache / "link").symlink_to(cache / "empty")
    with kiln.Client(kilnd.uri) as a:
        saved = a.snapshot_save(j, [str(cache)], KEYS)
    assert (saved.files, saved.files_uploaded, saved.files_added, saved.changed) == (5, 4, 5, True)
    assert saved.symlinks == 1, "the link was dropped without a word"
    assert saved.roots == [kiln.SnapshotRoot("cache", str(cache))] and len(saved.key) == 64
    moved = tmp_path / "host-a"
    cache.rename(moved)
    with kiln.Client(kilnd_fresh.uri) as b:
        restored = b.snapshot_restore(j, keys=KEYS)
    assert restored.found and restored.restored_files == 5 and restored.present == 0 and restored.missing == 0
    [root] = restored.roots
    assert (root.name, root.path, root.relocated, root.placement) == ("cache", str(cache), False, kiln.Placement.RENAMED)
    assert tree(cache) == FILES
    assert (cache / "triton/0/KEY/k.cubin").stat().st_mode & 0o777 == 0o755
    assert "host.target" in restored.environment and restored.environment["tool"] == "1.0"
    assert sorted(os.listdir(tmp_path)) == [".kiln-snapshot-cache.lock", "cache", "host-a"], "no staging left"
    mode = (tmp_path / ".kiln-snapshot-cache.lock").stat().st_mode
    assert mode & 0o022 == 0, f"the lock file is writable by others: {mode:o}"


def test_unchanged_files_are_not_sent_twice_and_a_changed_one_is(client: kiln.Client, tmp_path: Path) -> None:
    j, cache = job(), tmp_path / "c"
    make_tree(cache, {"a": os.urandom(1000), "b": os.urandom(1000)})
    assert client.snapshot_save(j, [str(cache)]).files_uploaded == 2
    again = client.snapshot_save(j, [str(cache)])
    assert (again.files_uploaded, again.bytes_uploaded, again.changed, again.files_added) == (0, 0, False, 0)
    (cache / "b").write_bytes(b"new content")
    changed = client.snapshot_save(j, [str(cache)])
    assert (changed.files_uploaded, changed.bytes_uploaded, changed.changed, changed.files_added) == (1, 11, True, 1)
    # Another job holding the same contents sends nothing either: contents are shared.
    assert client.snapshot_save(job(), [str(cache)]).files_uploaded == 0


def test_saves_union_and_never_shrink_a_snapshot(client: kiln.Client, tmp_path: Path) -> None:
    j = job()
    make_tree(tmp_path / "one", {"a": b"1", "b": b"2"})
    make_tree(tmp_path / "two", {"c": b"3"})
    client.snapshot_save(j, {"model": str(tmp_path / "one")})
    (tmp_path / "one" / "a").unlink()
    (tmp_path / "one" / "d").write_bytes(b"4")
    client.snapshot_save(j, {"model": str(tmp_path / "one")})
    last = client.snapshot_save(j, [f"other={tmp_path / 'two'}"])
    assert last.manifest_files == 4
    manifest = client.snapshot_show(j).manifest
    assert manifest is not None
    assert [(f.root, f.path) for f in manifest.files] == [("model", "a"), ("model", "b"), ("model", "d"), ("other", "c")]
    assert {r.name for r in manifest.roots} == {"model", "other"}
    listed = client.snapshot_list(j)
    assert len(listed) == 1 and listed[0].files == 4 and listed[0].key == manifest.key


def test_a_restore_skips_present_files_and_never_overwrites_one(client: kiln.Client, tmp_path: Path) -> None:
    j, cache = job(), tmp_path / "cache"
    make_tree(cache, FILES)
    client.snapshot_save(j, [str(cache)], KEYS)
    for rel in ("fxgraph/ab/entry", "empty"):
        (cache / rel).unlink()
    (cache / "triton/0/KEY/k.json").write_bytes(b"mine, different")
    (cache / "triton/0/KEY/k.cubin").unlink()
    (cache / "triton/0/KEY/k.cubin").symlink_to(cache / "same-as-json")
    restored = client.snapshot_restore(j, keys=KEYS)
    [root] = restored.roots
    assert (root.restored_files, root.present, root.missing, root.placement) == (2, 3, 0, kiln.Placement.LINKED)
    assert (cache / "triton/0/KEY/k.json").read_bytes() == b"mine, different"
    assert (cache / "triton/0/KEY/k.cubin").is_symlink()
    assert (cache / "fxgraph/ab/entry").read_bytes() == FILES["fxgraph/ab/entry"]
    again = client.snapshot_restore(j, keys=KEYS)
    assert (again.restored_files, again.present) == (0, 5)


def test_a_restore_to_another_path_is_reported_as_relocated(client: kiln.Client, tmp_path: Path) -> None:
    j = job()
    make_tree(tmp_path / "a", {"x": b"x"})
    client.snapshot_save(j, {"r": str(tmp_path / "a")})
    result = client.snapshot_restore(j, {"r": str(tmp_path / "b"), "nope": str(tmp_path / "c")})
    assert [(r.name, r.relocated, r.recorded_path) for r in result.relocated] == [("r", True, str(tmp_path / "a"))]
    assert result.unknown_roots == ["nope"] and tree(tmp_path / "b") == {"x": b"x"}
    assert not (tmp_path / "c").exists()
    missing = client.snapshot_restore(job())
    assert not missing.found and "host.target" in missing.host_environment


def test_a_restore_that_would_restore_nothing_is_refused_naming_the_roots(client: kiln.Client, tmp_path: Path) -> None:
    j = job()
    make_tree(tmp_path / "a", {"x": b"x"})
    client.snapshot_save(j, {"r": str(tmp_path / "a")})
    with pytest.raises(kiln.InvalidArgument, match=r"no root `nope`.*`r` \(saved at "):
        client.snapshot_restore(j, {"nope": str(tmp_path / "c")})
    with pytest.raises(kiln.InvalidArgument, match="no root `named`"):
        client.snapshot_restore(j, [f"named={tmp_path / 'd'}"])
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()
    bare = client.snapshot_restore(j, [str(tmp_path / "anywhere")])
    assert bare.restored_files == 1 and tree(tmp_path / "anywhere") == {"x": b"x"}


def test_a_restore_told_to_stop_leaves_the_target_as_it_was(client: kiln.Client, tmp_path: Path) -> None:
    j, cache = job(), tmp_path / "cache"
    make_tree(cache, {"a": os.urandom(100)})
    client.snapshot_save(j, [str(cache)])
    cache.rename(tmp_path / "saved")
    with pytest.raises(kiln.Cancelled):
        kiln.snapshot.restore(client, j, should_stop=lambda: True)
    assert sorted(os.listdir(tmp_path)) == [".kiln-snapshot-cache.lock", "saved"]


def test_roots_must_be_directories_and_named_once(client: kiln.Client, tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    cases = [([str(tmp_path / "absent")], "absent"), ([str(tmp_path / "file")], "file"), ({"a": str(tmp_path), "b": str(tmp_path)}, "two roots")]
    for dirs, words in cases:
        with pytest.raises(kiln.InvalidArgument, match=words):
            client.snapshot_save(job(), dirs)
    with pytest.raises(kiln.InvalidArgument, match="named twice"):
        client.snapshot_save(job(), [f"x={tmp_path}", f"x={tmp_path / 'other'}"])
    assert kiln.snapshot.parse_root("/srv/a=b").name == "a_b", "a path before = is no name"
    assert kiln.snapshot.parse_root("/x/caché dir/").name == "cach__dir"


def test_the_host_lock_refuses_a_symlink_planted_at_its_path(tmp_path: Path) -> None:
    from kiln._snapshot_place import lock_path, open_lock_file

    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, lock_path(str(tmp_path), "t"))
    with pytest.raises(OSError):
        open_lock_file(lock_path(str(tmp_path), "t"))
    assert victim.read_text() == "keep"


def test_staging_writes_only_verified_contents() -> None:
    good, bad = b"content", b"tampered"
    digest = blake3(good).digest()
    import tempfile

    with tempfile.TemporaryDirectory() as parent:
        staging = Staging.create(parent, "t", [("a/b", 0o640, digest, len(good)), ("c", 0o600, digest, len(good))])
        assert staging.write(digest, bad) == (0, 0) and staging.rejected == 1
        assert staging.write(digest, good) == (2, 2 * len(good))
        assert staging.write(digest, good) == (0, 0), "a repeated content is dropped"
        assert staging.missing_files() == 0
        placed = staging.place(os.path.join(parent, "t"))
        assert placed.files == 2 and os.listdir(parent) == ["t"]
        assert oct(os.stat(os.path.join(parent, "t", "a", "b")).st_mode & 0o777) == oct(0o640)
    for bad_path in ("", "/abs", "a//b", "a/./b", "../x", "a/..", "a\0b"):
        assert check_path(bad_path) is not None, bad_path
    assert check_path("a/b.c/.hidden") is None
    # A manifest with one bad path is refused whole, before anything is written.
    from kiln._proto import snapshot_pb2 as spb

    files = [spb.SnapshotFile(root="r", path=p, digest=digest, size=len(good)) for p in ("ok", "../escape")]
    manifest = spb.SnapshotManifest(roots=[spb.SnapshotRoot(name="r", path="/tmp/r")], files=files)
    with pytest.raises(kiln.KilnError, match=r"files\[1\].*nothing was restored"):
        kiln.snapshot._checked(manifest)


RESTORE_CHILD = """
    import json, os, sys, time
    import kiln
    uri, job, pause = sys.argv[1], sys.argv[2], sys.argv[3]

    def progress(p):
        if p.phase == "place" and pause == "pause":
            print("staged", flush=True)
            time.sleep(600)

    if pause == "ready":
        print("ready", flush=True)
        while not os.path.exists(sys.argv[4]):
            time.sleep(0.005)
    with kiln.Client(uri) as c:
        r = c.snapshot_restore(job, on_progress=progress)
    print(json.dumps({"restored": r.restored_files, "present": r.present, "missing": r.missing}), flush=True)
"""


def restore_child(uri: str, j: str, mode: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(RESTORE_CHILD), uri, j, mode, *extra], stdout=subprocess.PIPE, text=True
    )


def big_tree(n: int = 64, size: int = 64 * 1024) -> dict[str, bytes]:
    return {f"d{i % 4}/f{i}": os.urandom(size) for i in range(n)}


def test_a_killed_restore_leaves_only_whole_files_and_the_next_completes(client: kiln.Client, kilnd: Kilnd, tmp_path: Path) -> None:
    j, cache, files = job(), tmp_path / "cache", big_tree()
    make_tree(cache, files)
    client.snapshot_save(j, [str(cache)])
    # 1. Killed with everything staged, just before placing: the target is untouched.
    for name in list(files)[::3]:
        (cache / name).unlink()
    kept = tree(cache)
    child = restore_child(kilnd.uri, j, "pause")
    assert child.stdout is not None and child.stdout.readline().strip() == "staged"
    stale = [n for n in os.listdir(tmp_path) if n.startswith(".kiln-restore-cache-")]
    assert stale == [f".kiln-restore-cache-{child.pid}"]
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert tree(cache) == kept
    # 2. Killed at random points: whatever is in the target is whole.
    for _ in range(6):
        child = restore_child(kilnd.uri, j, "go")
        time.sleep(random.uniform(0.2, 0.6))
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert all(files[name] == data for name, data in tree(cache).items())
    # 3. The next restore removes the stale staging and completes.
    result = client.snapshot_restore(j)
    assert result.restored_files + result.present == len(files) and result.missing == 0
    assert tree(cache) == files
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".kiln-restore-")]


def test_eight_processes_restoring_one_directory_fetch_once(client: kiln.Client, kilnd: Kilnd, tmp_path: Path) -> None:
    j, cache, files = job(), tmp_path / "cache", big_tree(32, 16 * 1024)
    make_tree(cache, files)
    client.snapshot_save(j, [str(cache)])
    cache.rename(tmp_path / "saved")
    go = tmp_path / "go"
    children = [restore_child(kilnd.uri, j, "ready", str(go)) for _ in range(8)]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    fetched_before = metric(kilnd.metrics(), 'kiln_snapshot_restore_files_total{result="fetched"}')
    go.write_bytes(b"")
    results = []
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    restored = sorted(r["restored"] for r in results)
    assert restored == [0] * 7 + [len(files)], results
    assert sorted(r["present"] for r in results) == [0] + [len(files)] * 7
    assert metric(kilnd.metrics(), 'kiln_snapshot_restore_files_total{result="fetched"}') - fetched_before == len(files)
    assert tree(cache) == files


@pytest.fixture(scope="module")
def small_kilnd(tmp_path_factory: pytest.TempPathFactory):
    d = Kilnd(tmp_path_factory.mktemp("kilnd-small"), config="max_snapshot_mb = 1\n")
    yield d
    assert d.stop() == 0


def test_a_snapshot_over_the_size_bound_is_a_clear_error_and_stores_nothing(small_kilnd: Kilnd, tmp_path: Path) -> None:
    j = job()
    make_tree(tmp_path / "big", {"a": os.urandom(700_000), "b": os.urandom(700_000)})
    with kiln.Client(small_kilnd.uri) as c:
        with pytest.raises(kiln.ResourceExhausted, match="max_snapshot_mb") as e:
            c.snapshot_save(j, [str(tmp_path / "big")])
        assert "1400000 bytes" in e.value.details and "nothing was saved" in e.value.details
        assert c.snapshot_show(j).manifest is None
        # One file at a time: the first save fits, the union with the second would not.
        c.snapshot_save(j, {"one": str(_only(tmp_path, "a"))})
        with pytest.raises(kiln.ResourceExhausted):
            c.snapshot_save(j, {"two": str(_only(tmp_path, "b"))})
        manifest = c.snapshot_show(j).manifest
        assert manifest is not None and [f.path for f in manifest.files] == ["a"]


def _only(tmp_path: Path, name: str) -> Path:
    d = tmp_path / f"only-{name}"
    d.mkdir(exist_ok=True)
    (d / name).write_bytes((tmp_path / "big" / name).read_bytes())
    return d


def cli(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", "snapshot", *args, "--daemon", uri], capture_output=True, text=True)


def test_the_command_line(kilnd: Kilnd, tmp_path: Path) -> None:
    j, cache = job(), tmp_path / "cache"
    make_tree(cache, {"a/b": os.urandom(10), "c": os.urandom(10)})
    saved = cli(kilnd.uri, "save", "--job", j, "--key", "tool=1", "--json", str(cache))
    assert saved.returncode == 0, saved.stderr
    line = json.loads(saved.stdout)
    assert (line["event"], line["files"], line["files_uploaded"]) == ("saved", 2, 2)
    assert line["roots"] == [{"name": "cache", "path": str(cache)}]
    missing = cli(kilnd.uri, "restore", "--job", j, "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["event"] == "not_found"
    cache.rename(tmp_path / "moved")
    restored = cli(kilnd.uri, "restore", "--job", j, "--key", "tool=1", "--json", f"cache={tmp_path / 'elsewhere'}")
    assert restored.returncode == 0, restored.stderr
    root, last = [json.loads(x) for x in restored.stdout.splitlines()]
    assert (root["event"], root["restored_files"], root["relocated"], root["placement"]) == ("root", 2, True, "renamed")
    assert (last["event"], last["restored_files"], last["relocated"]) == ("restored", 2, ["cache"])
    assert "warning: root 'cache' was restored to" in restored.stderr
    shown = cli(kilnd.uri, "show", "--job", j, "--key", "tool=1", "--json")
    assert shown.returncode == 0
    *entries, manifest = [json.loads(x) for x in shown.stdout.splitlines()]
    assert [e["path"] for e in entries] == ["a/b", "c"] and manifest["event"] == "manifest" and manifest["files"] == 2
    assert len(entries[0]["digest"]) == 64
    listed = cli(kilnd.uri, "list", "--job", j, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout.splitlines()[-1]) == {"event": "listed", "snapshots": 1}
    text = cli(kilnd.uri, "show", "--job", j, "--key", "tool=1")
    assert text.returncode == 0 and "root cache  " + str(cache) in text.stdout
    assert cli(kilnd.uri, "save", str(cache)).returncode == 2, "--job is required"
    down = cli(f"unix://{tmp_path}/none.sock", "list")
    assert down.returncode == 2 and down.stderr.startswith("error: unavailable:")


def rust_cli(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The Rust ``kiln`` binary: the other implementation of save and restore."""
    return subprocess.run([str(binary("kiln")), "--daemon", uri, "snapshot", *args], capture_output=True, text=True)


CROSS = {
    "inductor/fx/ab/entry": os.urandom(30_000),
    "inductor/triton/0/K/k.cubin": os.urandom(9_000),
    "inductor/triton/0/K/k.json": b'{"name": "k"}',
    "inductor/copy.json": b'{"name": "k"}',
    "inductor/empty": b"",
}


@pytest.mark.parametrize("saver", ["python", "rust"])
def test_each_implementation_restores_what_the_other_saved(saver: str, kilnd: Kilnd, kilnd_fresh: Kilnd, tmp_path: Path) -> None:
    """kiln.Client and the `kiln` binary share a protocol, a manifest and on-disk names (the host
    lock beside the target, the staging directory): a snapshot saved by one restores whole
    through the other, modes and all, and leaves the same names behind."""
    j, cache = job(), tmp_path / "inductor"
    make_tree(tmp_path, CROSS)
    (tmp_path / "inductor/triton/0/K/k.cubin").chmod(0o750)
    if saver == "python":
        with kiln.Client(kilnd.uri) as a:
            assert a.snapshot_save(j, [str(cache)], KEYS).files == len(CROSS)
    else:
        keys = [f"--key={k}={v}" for k, v in KEYS.items()]
        saved = rust_cli(kilnd.uri, "save", "--job", j, *keys, str(cache))
        assert saved.returncode == 0, saved.stderr
    elsewhere = tmp_path / "restored"
    if saver == "python":
        keys = [f"--key={k}={v}" for k, v in KEYS.items()]
        restored = rust_cli(kilnd_fresh.uri, "restore", "--job", j, *keys, "--json", str(elsewhere / "inductor"))
        assert restored.returncode == 0, restored.stderr
        assert json.loads(restored.stdout.splitlines()[-1])["restored_files"] == len(CROSS)
    else:
        with kiln.Client(kilnd_fresh.uri) as b:
            report = b.snapshot_restore(j, [str(elsewhere / "inductor")], KEYS)
        assert report.found and report.restored_files == len(CROSS) and report.missing == 0
    want = {rel.removeprefix("inductor/"): data for rel, data in CROSS.items()}
    assert tree(elsewhere / "inductor") == want
    assert (elsewhere / "inductor/triton/0/K/k.cubin").stat().st_mode & 0o777 == 0o750
    assert sorted(os.listdir(elsewhere)) == [".kiln-snapshot-inductor.lock", "inductor"], "no staging left"
