"""Shared pieces of the GPU run: ports, waiting for services, Prometheus text, kilnd processes,
and a record of checks that keeps going after a failure (GPU time is scarce: one run should say
everything that is wrong, not only the first thing).

Also a small command line for tests/gpu/run:

    common.py free-ports N           N free loopback ports, one per line
    common.py wait-unix PATH SECS    until a unix socket accepts a connection
    common.py wait-tcp PORT SECS     until 127.0.0.1:PORT accepts a connection
    common.py wait-http PORT SECS    until http://127.0.0.1:PORT/metrics answers
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def unix_connects(path: str | Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(str(path))
        return True
    except OSError:
        return False


def tcp_connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def http_get(port: int, path: str = "/metrics", timeout: float = 10) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read().decode(errors="replace")
        if resp.status != 200:
            raise OSError(f"GET {path}: HTTP {resp.status}")
        return body
    finally:
        conn.close()


def http_ok(port: int) -> bool:
    try:
        http_get(port, timeout=2)
        return True
    except OSError:
        return False


def wait_for(what: str, ready, seconds: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting:\n{tail}")
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer within {seconds:.0f} s")


# -- Prometheus text --


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        name = text[i:eq].strip().lstrip(",").strip()
        j = eq + 2  # past ="
        value = []
        while text[j] != '"':
            if text[j] == "\\":
                j += 1
            value.append(text[j])
            j += 1
        labels[name] = "".join(value)
        i = j + 1
        while i < len(text) and text[i] in ", ":
            i += 1
    return labels


def metric_sum(text: str, name: str, **want: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``want`` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        rest = line[len(name) :]
        if rest.startswith("{"):
            close = rest.rindex("}")
            labels = parse_labels(rest[1:close])
            value = rest[close + 1 :].split()[0]
        elif rest.startswith(" "):
            labels, value = {}, rest.split()[0]
        else:
            continue  # a longer name that starts with this one
        if all(labels.get(k) == v for k, v in want.items()):
            total += float(value)
    return total


def metric_samples(text: str, prefix: str) -> dict[str, float]:
    """Every sample whose metric name starts with ``prefix``, by its full name and labels as
    written (``kiln_snapshot_restores_total{result="found"}``)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def metric_deltas(before: str, after: str, prefix: str) -> dict[str, float]:
    """``after - before`` for every sample of ``metric_samples``, zeros left out."""
    a, b = metric_samples(after, prefix), metric_samples(before, prefix)
    return {k: v - b.get(k, 0.0) for k, v in sorted(a.items()) if v - b.get(k, 0.0) != 0}


# -- kilnd's Snapshots service --


def list_snapshots(uri: str, job: str, timeout: float = 10) -> list[dict]:
    """``kiln.v1.Snapshots/ListSnapshots`` for one job through the kilnd at ``uri``: one dict per
    environment (files, total_bytes, updated_unix_ms, saved_by, roots, environment, key).
    Raises ``grpc.RpcError`` (an old kilnd answers UNIMPLEMENTED) or ``ImportError`` (a kiln
    package without the snapshot stubs)."""
    import grpc
    from kiln._proto import snapshot_pb2, snapshot_pb2_grpc

    options = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    if uri.startswith("unix:"):
        target = uri
        options.append(("grpc.default_authority", "localhost"))  # as kiln.client does for unix sockets
    else:
        target = uri.split("://", 1)[-1].rstrip("/")
    with grpc.insecure_channel(target, options=options) as channel:
        reply = snapshot_pb2_grpc.SnapshotsStub(channel).ListSnapshots(snapshot_pb2.ListSnapshotsRequest(job=job), timeout=timeout)
    return [
        {
            "job": s.job,
            "key": s.key,
            "files": int(s.files),
            "total_bytes": int(s.total_bytes),
            "updated_unix_ms": int(s.updated_unix_ms),
            "saved_by": s.saved_by,
            "roots": {r.name: r.path for r in s.roots},
            "environment": dict(s.environment),
        }
        for s in reply.snapshots
        if s.job == job
    ]


# -- kilnd --


@dataclass
class Kilnd:
    """One kilnd "host": its own socket, cache directory, metrics port and log."""

    name: str
    binary: str
    dir: Path
    cuda_root: str
    python: str
    remote: str = ""
    target: str = ""
    proc: subprocess.Popen | None = None
    metrics_port: int = 0
    extra_args: list[str] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.dir / "kilnd.sock"

    @property
    def uri(self) -> str:
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        return self.dir / "kilnd.log"

    def start(self, wait_secs: float = 90) -> Kilnd:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.metrics_port,) = free_ports(1)
        args = [self.binary, "--socket", str(self.socket), "--cache-dir", str(self.dir / "cache")]
        args += ["--cuda-root", self.cuda_root, "--python", self.python]
        args += ["--metrics", f"127.0.0.1:{self.metrics_port}"]
        if self.remote:
            args += ["--remote", self.remote]
        if self.target:
            args += ["--target", self.target]
        args += self.extra_args
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
        env.setdefault("KILN_LOG", "info")
        with open(self.log, "ab") as log:
            log.write(("$ " + " ".join(args) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(
            f"kilnd {self.name}",
            lambda: unix_connects(self.socket) and http_ok(self.metrics_port),
            wait_secs,
            self.proc,
            self.log,
        )
        return self

    def metrics(self) -> str:
        return http_get(self.metrics_port)

    def stop(self, bound: float = 60) -> int:
        """SIGTERM, then the exit status (SIGKILL past ``bound``, reported as -9)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(bound)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


#: The longest a new kilnd's spares may take to start their compile pools once its workers are up.
SPARES_SETTLE_S = 60.0


def _busy_and_total() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def wait_until_idle(bound_s: float, busy_below: float = 0.05, window_s: float = 2.0) -> float:
    """Waits until the host's CPUs were busy less than ``busy_below`` of a ``window_s`` window, or
    ``bound_s`` passed; the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        busy0, total0 = _busy_and_total()
        time.sleep(window_s)
        busy1, total1 = _busy_and_total()
        if total1 > total0 and (busy1 - busy0) / (total1 - total0) < busy_below:
            break
    return time.monotonic() - started


def own_kilnd_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments tests/gpu/run gives a part that starts kilnds of its own (``own_kilnd_part``):
    the kilnd binary, its CUDA root and torch interpreter, the job's interpreter, the work and
    output directories, the device, and kilnd's target where it sees no GPU."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kilnd", required=True)
    p.add_argument("--cuda-root", required=True)
    p.add_argument("--kilnd-python", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--target", default="", help="kilnd's GPU target where it sees no GPU (a CPU dry run)")
    return p


def cold_graph_kilnd(work: Path, name: str, a, remote: str = "", prestart: bool = True) -> Kilnd:
    """A new kilnd with an empty cache under ``work/kilnd-<name>``, its torch workers started with it
    and waited for, and then their spares' compile pools (a long-running kilnd on a GPU host has
    them up: the figures are the compile's, not torch's import on a host where a job starts with
    its kilnd). ``a`` holds the harness's ``kilnd``, ``cuda_root``, ``kilnd_python`` and ``target``
    arguments; ``remote``, a kiln-cache for its fleet tier. ``prestart=False``: kilnd as deployed
    by default, its torch workers started only when a job asks for them."""
    import shutil

    d = work / f"kilnd-{name}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "kilnd.toml").write_text(f"torch_prestart = {'true' if prestart else 'false'}\n")
    k = Kilnd(name, a.kilnd, d, a.cuda_root, a.kilnd_python, remote=remote, target=a.target, extra_args=["--config", str(d / "kilnd.toml")])
    k.start()
    if not prestart:
        print(f"    kilnd {name}: up, torch workers not started", flush=True)
        return k
    import kiln

    with kiln.Client(k.uri) as c:
        wait_for(f"kilnd {name}'s torch workers", lambda: c.warm_torch_workers() is not None, 300, k.proc, k.log)
    # Each spare starts its pool two seconds after it is ready, and the pool's processes import
    # torch for seconds more (about 40 processes on a 32-core host): wait until the host is idle.
    settled = wait_until_idle(SPARES_SETTLE_S)
    print(f"    kilnd {name}: workers up, host idle after {settled:.1f} s", flush=True)
    return k


# -- checks --


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP | INFO
    detail: str = ""


class Checks:
    """Named checks; a failure is recorded and the run goes on."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.items: list[Check] = []

    def record(self, name: str, ok: bool, detail: str = "") -> bool:
        self.items.append(Check(name, "PASS" if ok else "FAIL", detail))
        mark = "ok  " if ok else "FAIL"
        print(f"[{mark}] {name}{': ' + detail if detail else ''}", flush=True)
        return ok

    def skip(self, name: str, why: str) -> None:
        self.items.append(Check(name, "SKIP", why))
        print(f"[SKIP] {name}: {why}", flush=True)

    def info(self, name: str, detail: str) -> None:
        self.items.append(Check(name, "INFO", detail))
        print(f"[info] {name}: {detail}", flush=True)

    def guard(self, name: str):
        """A context manager: an exception inside is this check's failure (with its traceback)."""
        checks = self

        class _Guard:
            def __enter__(self) -> None:
                return None

            def __exit__(self, kind, value, tb) -> bool:
                if kind is None:
                    return False
                if kind is KeyboardInterrupt:
                    return False
                text = "".join(traceback.format_exception(kind, value, tb))
                print(text, file=sys.stderr, flush=True)
                checks.record(name, False, f"{kind.__name__}: {value}")
                return True

        return _Guard()

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.items if c.status == "FAIL"]

    def summary(self) -> str:
        counts = {s: sum(1 for c in self.items if c.status == s) for s in ("PASS", "FAIL", "SKIP")}
        lines = [f"## {self.title}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"]
        for c in self.items:
            if c.status != "PASS" or os.environ.get("KILN_GPU_VERBOSE"):
                lines.append(f"  {c.status:4}  {c.name}{': ' + c.detail if c.detail else ''}")
        return "\n".join(lines)

    def to_json(self) -> list[dict]:
        return [c.__dict__ for c in self.items]


def write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    tmp.replace(path)


def _main(argv: list[str]) -> int:
    cmd = argv[0] if argv else ""
    if cmd == "free-ports":
        print("\n".join(str(p) for p in free_ports(int(argv[1]))))
        return 0
    if cmd in ("wait-unix", "wait-tcp", "wait-http"):
        target, secs = argv[1], float(argv[2])
        ready = {
            "wait-unix": lambda: unix_connects(target),
            "wait-tcp": lambda: tcp_connects(int(target)),
            "wait-http": lambda: http_ok(int(target)),
        }[cmd]
        try:
            wait_for(f"{cmd} {target}", ready, secs)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
