"""Real processes for the Python tests: redis-server, kiln-cache and kilnd.

Each starts in its own directory, on a private socket or loopback port, and is waited for until
it answers. A missing binary or toolchain raises :class:`MissingComponent` saying what to run,
which fails the test (never a skip). Processes are stopped by the fixtures that started them
(SIGTERM, then SIGKILL after a bound). No pytest here: bench/fleet_herd.py uses it too.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
PYTHON_DIR = REPO / "client" / "python"

WRITE_TOKEN = "python-test-write-token-0123456789"


class MissingComponent(RuntimeError):
    """A binary, tool or toolchain the tests need is not there; the message says how to fix it."""


class StartFailed(RuntimeError):
    """A process exited during start-up or did not answer in time."""


def require(module: str) -> Any:
    """``module`` imported; a :class:`MissingComponent` that fails the suite where it is not
    installed (scripts/test installs torch into .venv), never a skip."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingComponent(f"{module} is not installed in {sys.executable}: run scripts/test, which installs it") from e


def binary(name: str) -> Path:
    """A workspace binary: ``$KILN_BIN_DIR/name`` or ``target/debug/name``."""
    path = Path(os.environ.get("KILN_BIN_DIR", REPO / "target" / "debug")) / name
    if not path.is_file():
        raise MissingComponent(f"{path} is missing: build the binaries first (`cargo build --workspace --bins`, which scripts/test does)")
    return path


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MissingComponent(f"{name} is missing: run scripts/test, which installs Redis (or `apt-get install -y redis-server`)")
    return found


def cuda_root() -> Path:
    """The pinned CUDA wheel tree (KILN_CUDA_ROOT / KILN_TEST_CUDA_ROOT, else this interpreter's
    nvidia/cu13)."""
    for var in ("KILN_TEST_CUDA_ROOT", "KILN_CUDA_ROOT"):
        if os.environ.get(var):
            return Path(os.environ[var])
    try:
        import nvidia  # type: ignore[import-not-found]

        root = Path(list(nvidia.__path__)[0]) / "cu13"
    except ImportError:
        root = Path("/nonexistent")
    if not (root / "lib" / "libnvrtc.so.13").is_file():
        raise MissingComponent(f"NVRTC is missing under {root}: run scripts/test, which installs the pinned CUDA wheels into .venv/")
    return root


def _port_range() -> range:
    """The ports this process hands out: below the kernel's ephemeral range (32768 and up), since
    a port bound at 0 and closed is an ephemeral one, which any outgoing connection may be given
    before the server binds it ("address in use" at start-up). Each pytest-xdist worker has a
    slice of its own: consecutive workers' pids once gave them ranges one port apart, so both
    handed out the same ports, and a kilnd of one failed to bind the other's. Within the slice
    the start moves with the pid, for two pytest runs side by side."""
    low, high = 25_000, 32_768
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or "0") % workers
    size = (high - low) // workers
    start = low + worker * size
    return range(start + os.getpid() % (size // 2), start + size)


# Each call tries ports no earlier call was handed.
_PORTS = iter(_port_range())


def free_port() -> int:
    for port in _PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free TCP port left in {_port_range()}")


def _wait(what: str, ready, proc: subprocess.Popen | None, log: Path | None, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            text = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
            raise StartFailed(f"{what} exited during start-up with {proc.returncode}:\n{text}")
        if ready():
            return
        time.sleep(0.02)
    raise StartFailed(f"{what} did not answer within {bound:.0f} s")


def _connects(address: Path | int) -> bool:
    """Whether something accepts connections at ``address``: a Unix socket's path, or a TCP port
    on the loopback address."""
    if isinstance(address, int):
        family, target = socket.AF_INET, ("127.0.0.1", address)
    else:
        family, target = socket.AF_UNIX, str(address)
    try:
        with socket.socket(family) as s:
            s.settimeout(1)
            s.connect(target)
        return True
    except OSError:
        return False


def http_get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _http_ok(port: int) -> bool:
    try:
        http_get(port, "/metrics")
        return True
    except OSError:
        return False


class Process:
    """A child process with its log file; ``stop`` is SIGTERM, then SIGKILL after ``bound``."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log = log
        self._log_file = open(log, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the process's log, for a failing assertion's message."""
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self, bound: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(bound)
        self.kill9()
        return self.proc.returncode

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


class Redis(Process):
    def __init__(self, dir: Path) -> None:
        dir.mkdir(parents=True, exist_ok=True)
        self.socket = dir / "redis.sock"
        args = [tool("redis-server"), "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(dir), "--daemonize", "no", "--loglevel", "warning"]
        super().__init__("redis-server", args, dir / "redis.log")
        _wait("redis-server", lambda: _connects(self.socket), self.proc, self.log, 20)

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"


class CacheServer(Process):
    def __init__(self, dir: Path, redis: Redis) -> None:
        dir.mkdir(parents=True, exist_ok=True)
        tokens = dir / "tokens"
        tokens.write_text(f"write:{WRITE_TOKEN}\n")
        (dir / "kiln-cache.toml").write_text("")
        self.port = free_port()
        self.metrics_port = free_port()
        args = [str(binary("kiln-cache")), "--listen", f"127.0.0.1:{self.port}", "--metrics", f"127.0.0.1:{self.metrics_port}"]
        args += ["--redis", redis.url, "--tokens", str(tokens), "--config", str(dir / "kiln-cache.toml")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_CACHE_")}
        env["KILN_LOG"] = "warn"
        super().__init__("kiln-cache", args, dir / "kiln-cache.log", env)
        _wait("kiln-cache", lambda: _connects(self.port) and _http_ok(self.metrics_port), self.proc, self.log, 30)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Kilnd(Process):
    """kilnd on ``dir/kilnd.sock`` with its cache in ``dir/cache``, sm_90, the .venv Python for
    Triton, and the fleet cache when ``remote`` is given."""

    def __init__(self, dir: Path, remote: CacheServer | None = None, config: str = "", extra_env: dict[str, str] | None = None) -> None:
        dir.mkdir(parents=True, exist_ok=True)
        self.dir = dir
        self.socket = dir / "kilnd.sock"
        self.metrics_port = free_port()
        (dir / "kilnd.toml").write_text(config)
        args = [str(binary("kilnd")), "--socket", str(self.socket), "--cache-dir", str(dir / "cache")]
        args += ["--cuda-root", str(cuda_root()), "--python", sys.executable, "--target", "sm_90"]
        args += ["--metrics", f"127.0.0.1:{self.metrics_port}", "--concurrency", "2", "--config", str(dir / "kilnd.toml")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
        env["KILN_LOG"] = "warn"
        if remote is not None:
            args += ["--remote", remote.uri]
            env["KILN_REMOTE_TOKEN"] = WRITE_TOKEN
        env.update(extra_env or {})
        super().__init__("kilnd", args, dir / "kilnd.log", env)
        _wait("kilnd", lambda: _connects(self.socket) and _http_ok(self.metrics_port), self.proc, self.log, 60)

    @property
    def uri(self) -> str:
        return f"unix://{self.socket}"

    def metrics(self) -> str:
        return http_get(self.metrics_port, "/metrics")

    def warm_torch_workers(self, bound: float = 300.0) -> str:
        """Starts kilnd's torch workers and waits until they are up: their torch version. A test
        that needs them idle and ready fails here, by name, if they never come up."""
        import kiln

        deadline = time.monotonic() + bound
        with kiln.Client(self.uri) as c:
            while (version := c.warm_torch_workers()) is None:
                if time.monotonic() > deadline:
                    raise AssertionError(f"kilnd's torch workers were not up within {bound:.0f} s (log: {self.log})")
                time.sleep(0.5)
        return version


def metric(text: str, series: str) -> float:
    """The value of one series line (``name{labels}``) in Prometheus text; 0 when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0
