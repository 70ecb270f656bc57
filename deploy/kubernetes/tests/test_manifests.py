"""Offline checks of deploy/kubernetes: every variant renders with `kubectl kustomize`, every
rendered object validates against the Kubernetes schemas (kubernetes-validate, strict), the
manifests refer to each other consistently, every flag and KILN_* variable they use exists in the
real binaries, and a small fleet started from the rendered small overlay (its redis.conf, its
ConfigMaps, its args, env and probes) runs: Redis, kiln-cache and kilnd from target/, a job-like
compile through the socket, every probe passing, and a clean SIGTERM.

Run by scripts/test (check_kubernetes in scripts/lib/kubernetes.sh), which installs kubectl and
kubernetes-validate into .venv and builds the binaries. Environment: KUBECTL, KILN_BIN_DIR,
KILN_CUDA_ROOT and KILN_PYTHON; redis-server on PATH.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

HERE = Path(__file__).resolve().parent
KUBE = HERE.parent
ROOT = KUBE.parent.parent
# The oldest Kubernetes these manifests are meant for, and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
# Secrets the manifests name and that an operator creates (deploy/kubernetes/README.md says how).
EXTERNAL_SECRETS = {"kilnd-token", "kiln-cache-tokens", "kiln-cache-redis", "kiln-cache-tls"}
BINARIES = {"kilnd", "kiln-cache", "kiln"}

# The Python tests' harness: its loopback ports come from below the ephemeral range.
sys.path.insert(0, str(ROOT / "client" / "python" / "tests"))
from harness import free_port  # noqa: E402


def kubectl() -> str:
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    assert path, "no kubectl: scripts/test installs one into .venv (ensure_kube_tools)"
    return path


def bin_dir() -> Path:
    path = Path(os.environ.get("KILN_BIN_DIR", ROOT / "target" / "debug"))
    for name in BINARIES:
        assert (path / name).is_file(), f"{path / name} is missing: cargo build --workspace --bins"
    return path


def render(directory: Path) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {directory}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render_with(tmp_path: Path, overlay: str, components: list[str]) -> list[dict]:
    # kustomize refuses absolute paths to other kustomizations, so the variant names them relatively.
    rel = os.path.relpath(KUBE, tmp_path)
    listed = ", ".join(f"{rel}/components/{c}" for c in components)
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{rel}/overlays/{overlay}]\ncomponents: [{listed}]\n")
    return render(tmp_path)


# "A+b+c": overlay A with components b and c.
VARIANTS = ["overlays/small", "overlays/redis-cluster", "small+tls", "small+monitoring+tls", "job"]


def render_variant(variant: str, tmp_path: Path) -> list[dict]:
    if "+" in variant:
        overlay, *components = variant.split("+")
        return render_with(tmp_path, overlay, components)
    return render(KUBE / variant)


def test_servicemonitors_come_only_with_the_monitoring_component(tmp_path: Path):
    """A cluster without the Prometheus Operator refuses ServiceMonitors, so the overlays apply
    there as they are; the monitoring component adds one per daemon, in the kiln namespace."""
    for overlay in ("overlays/small", "overlays/redis-cluster"):
        kinds = {o["kind"] for o in render(KUBE / overlay)}
        assert "ServiceMonitor" not in kinds, f"{overlay} renders a ServiceMonitor without the component"
    monitors = [o for o in render_with(tmp_path, "small", ["monitoring"]) if o["kind"] == "ServiceMonitor"]
    assert sorted(m["metadata"]["name"] for m in monitors) == ["kiln-cache", "kilnd"]
    assert all(m["metadata"]["namespace"] == "kiln" for m in monitors), monitors


def one(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


def workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def containers(objects: list[dict]):
    for w in workloads(objects):
        for c in w["spec"]["template"]["spec"]["containers"]:
            yield w, c


def probes(container: dict):
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            yield kind, container[kind]


def configmap_file(objects: list[dict], workload: dict, volume: str, key: str) -> str:
    vols = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    cm = one(objects, "ConfigMap", vols[volume]["configMap"]["name"])
    return cm["data"][key]


def mount_path(container: dict, volume: str) -> str:
    return next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume)


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_renders_and_validates(variant: str, tmp_path: Path):
    objects = render_variant(variant, tmp_path)
    assert objects, f"{variant} renders nothing"
    monitor_schema = json.loads((HERE / "servicemonitor.schema.json").read_text())
    for obj in objects:
        where = f"{variant}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "ServiceMonitor":
            # A CRD: the validator's schemas have none; this subset is ours (see its description).
            jsonschema.validate(obj, monitor_schema)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{where} is not valid Kubernetes {version}: {e.message} at {list(e.path)}")
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"{where}: no schema in Kubernetes {version}")


def test_an_invalid_object_is_caught():
    """The validator is strict: a misspelt field fails, so a pass above means something."""
    daemonset = one(render(KUBE / "overlays/small"), "DaemonSet", "kilnd")
    daemonset["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("variant", VARIANTS)
def test_references_resolve(variant: str, tmp_path: Path):
    objects = render_variant(variant, tmp_path)
    rendered_configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    secrets_named = set()
    pods = []
    for w in workloads(objects):
        spec = w["spec"]["template"]["spec"]
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        if "selector" in w["spec"] and w["kind"] != "Job":
            sel = w["spec"]["selector"]["matchLabels"]
            assert sel.items() <= labels.items(), f"{w['metadata']['name']}: selector matches no pod label"
        ports = {p["name"]: p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])}
        pods.append((w, labels, ports))
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "configMap" in v:
                assert v["configMap"]["name"] in rendered_configmaps, f"{v['configMap']['name']} is not rendered"
            if "secret" in v:
                secrets_named.add(v["secret"]["secretName"])
        claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes or m["name"] in claims, f"{c['name']} mounts no volume {m['name']}"
            for e in c.get("env", []):
                if "secretKeyRef" in e.get("valueFrom", {}):
                    secrets_named.add(e["valueFrom"]["secretKeyRef"]["name"])
            for _, probe in probes(c):
                for how in ("httpGet", "tcpSocket", "grpc"):
                    port = probe.get(how, {}).get("port")
                    if isinstance(port, str):
                        assert port in ports, f"{c['name']}: a probe names port {port}, not a container port"
                    if how == "grpc" and port is not None:
                        numbers = {p["containerPort"] for p in c.get("ports", [])}
                        assert port in numbers, f"{c['name']}: a gRPC probe's port {port} is no container port"
    assert secrets_named <= EXTERNAL_SECRETS, f"unexpected secrets {secrets_named - EXTERNAL_SECRETS}"
    readme = (KUBE / "README.md").read_text()
    for name in secrets_named:
        assert name in readme, f"deploy/kubernetes/README.md does not say how to create Secret {name}"

    services = [o for o in objects if o["kind"] == "Service"]
    for svc in services:
        selected = [(w, ports) for w, labels, ports in pods if svc["spec"]["selector"].items() <= labels.items()]
        assert selected, f"Service {svc['metadata']['name']} selects no pod"
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            for w, ports in selected:
                ok = target in ports if isinstance(target, str) else target in ports.values()
                assert ok, f"Service {svc['metadata']['name']}: {w['metadata']['name']} has no port {target}"
    for mon in (o for o in objects if o["kind"] == "ServiceMonitor"):
        sel = mon["spec"]["selector"]["matchLabels"]
        matched = [s for s in services if sel.items() <= s["metadata"].get("labels", {}).items()]
        assert matched, f"ServiceMonitor {mon['metadata']['name']} selects no Service"
        for ep in mon["spec"]["endpoints"]:
            for s in matched:
                names = {p["name"] for p in s["spec"]["ports"]}
                assert ep["port"] in names, f"{s['metadata']['name']}: no port {ep['port']}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_image_is_one_scripts_images_builds(variant: str, tmp_path: Path):
    out = subprocess.run([str(ROOT / "scripts" / "images"), "--names"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"scripts/images --names: {out.stderr}"
    built = set(out.stdout.split())
    assert built, "scripts/images --names printed no image"
    for _, c in containers(render_variant(variant, tmp_path)):
        assert c["image"] in built, f"{c['name']}: image {c['image']} is not one scripts/images builds ({sorted(built)})"


def test_the_dashboard_configmap_is_the_dashboard_file():
    """The ConfigMap is generated from deploy/grafana/kiln.json, whose queries
    tests/tests/dashboard.rs checks against the real daemons' /metrics."""
    cm = one(render(KUBE / "overlays/small"), "ConfigMap", "kiln-grafana-dashboard")
    assert cm["data"]["kiln.json"] == (ROOT / "deploy/grafana/kiln.json").read_text()
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "kiln"


def help_text(binary: Path, *subcommand: str) -> str:
    out = subprocess.run([str(binary), *subcommand, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def flags_in(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_flag_and_variable_exists(variant: str, tmp_path: Path):
    bins = bin_dir()
    python_sources = "".join(p.read_text() for p in (ROOT / "client/python/src/kiln").rglob("*.py"))
    for _, c in containers(render_variant(variant, tmp_path)):
        argv = c.get("command", [])[:1]
        name = argv[0] if argv else None
        if name in BINARIES:
            text = help_text(bins / name)
            for flag in flags_in(c.get("args", [])):
                assert re.search(rf"\s{re.escape(flag)}[ ,\n]", text), f"{name} has no flag {flag}"
            for var in env_of(c):
                if var.startswith("KILN_") and var != "KILN_LOG":
                    assert f"[env: {var}" in text, f"{name} reads no variable {var}"
        elif c["name"] == "train":
            for var in env_of(c):
                assert var in python_sources, f"the kiln Python package reads no {var}"
        for _, probe in probes(c):
            command = probe.get("exec", {}).get("command", [])
            if command and command[0] in BINARIES:
                sub = [a for a in command[1:] if not a.startswith("-")][:1]
                text = help_text(bins / command[0], *sub)
                for flag in flags_in(command):
                    assert re.search(rf"\s{re.escape(flag)}[ ,\n]", text), f"{command[0]} {sub} has no flag {flag}"


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_ports_paths_and_addresses_agree():
    objects = render(KUBE / "overlays/small")
    kilnd = one(objects, "DaemonSet", "kilnd")
    cache = one(objects, "Deployment", "kiln-cache")
    redis = one(objects, "StatefulSet", "kiln-redis")
    kc = kilnd["spec"]["template"]["spec"]["containers"][0]
    cc = cache["spec"]["template"]["spec"]["containers"][0]
    rc = redis["spec"]["template"]["spec"]["containers"][0]
    ports = lambda c: {p["name"]: p["containerPort"] for p in c["ports"]}  # noqa: E731

    kilnd_toml = tomllib.loads(configmap_file(objects, kilnd, "config", "kilnd.toml"))
    assert kc["args"] == ["--config", mount_path(kc, "config") + "/kilnd.toml"]
    assert port_of(kilnd_toml["metrics"]) == ports(kc)["metrics"]
    assert str(Path(kilnd_toml["socket"]).parent) == mount_path(kc, "socket")
    assert kilnd_toml["cache_dir"] == mount_path(kc, "cache")
    socket_volume = next(v for v in kilnd["spec"]["template"]["spec"]["volumes"] if v["name"] == "socket")
    assert socket_volume["hostPath"]["path"] == mount_path(kc, "socket")
    for _, probe in probes(kc):
        assert probe["exec"]["command"][-1] == "unix://" + kilnd_toml["socket"]
    env = env_of(kc)
    assert env["KILN_REMOTE_TOKEN"].startswith("@" + mount_path(kc, "token") + "/")
    svc = one(objects, "Service", "kiln-cache")
    grpc_port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert env["KILN_REMOTE"] == f"http://kiln-cache:{grpc_port}"

    cache_toml = tomllib.loads(configmap_file(objects, cache, "config", "kiln-cache.toml"))
    assert cc["args"] == ["--config", mount_path(cc, "config") + "/kiln-cache.toml"]
    assert port_of(cache_toml["listen"]) == ports(cc)["grpc"]
    assert port_of(cache_toml["metrics"]) == ports(cc)["metrics"]
    assert str(Path(cache_toml["tokens_file"]).parent) == mount_path(cc, "tokens")

    conf = configmap_file(objects, redis, "config", "redis.conf")
    settings = dict(line.split(None, 1) for line in conf.splitlines() if line and not line.startswith("#"))
    assert settings["maxmemory-policy"] == "allkeys-lru" and settings["maxmemory"] != "0"
    assert int(settings["port"]) == ports(rc)["redis"]
    assert env_of(cc)["KILN_CACHE_REDIS"] == f"redis://kiln-redis:{settings['port']}"
    assert rc["command"] == ["redis-server", mount_path(rc, "config") + "/redis.conf"]

    job = one(render(KUBE / "job"), "Job", "kiln-train-example")
    jc = job["spec"]["template"]["spec"]["containers"][0]
    assert env_of(jc)["KILN_DAEMON"] == "unix://" + kilnd_toml["socket"]
    assert env_of(jc)["KILN_TORCH"] == "1"
    job_socket = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "kiln-socket")
    assert job_socket["hostPath"]["path"] == socket_volume["hostPath"]["path"]
    assert kilnd["spec"]["template"]["spec"]["securityContext"]["runAsGroup"] in (
        job["spec"]["template"]["spec"]["securityContext"]["supplementalGroups"]
    )


EXAMPLE_SCRIPT = KUBE / "job" / "train.py"
EXAMPLE_DOCKERFILE = ROOT / "deploy" / "images" / "train-example.Dockerfile"


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per instruction of the last stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    last = max(i for i, line in enumerate(lines) if line.upper().startswith("FROM "))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines[last:]]


def test_the_example_job_runs_the_script_its_image_ships():
    """The Job's command is the script scripts/images puts in kiln/train-example, as that image's
    user; the script is deploy/kubernetes/job/train.py and takes the flags the Job passes."""
    job = one(render(KUBE / "job"), "Job", "kiln-train-example")
    spec = job["spec"]["template"]["spec"]
    jc = spec["containers"][0]
    python, script, *flags = jc["command"]
    steps = dockerfile_instructions(EXAMPLE_DOCKERFILE)
    copies = {rest.split()[-1]: rest.split()[-2] for op, rest in steps if op == "COPY" and "--from" not in rest}
    assert copies.get(script) == "train.py", f"the image does not ship the Job's {script} (COPY: {copies})"
    assert json.loads(dict(steps)["ENTRYPOINT"]) == [python, script]
    user = dict(steps)["USER"].split(":")
    assert int(user[0]) == spec["securityContext"]["runAsUser"], "the image's user is not the Job's"
    images_sh = (ROOT / "scripts/lib/images.sh").read_text()
    assert '"$KILN_ROOT/deploy/kubernetes/job/train.py" "$staged/train.py"' in images_sh, (
        "scripts/lib/images.sh does not put deploy/kubernetes/job/train.py in the image's context"
    )
    assert "deploy/images/train-example.Dockerfile" in images_sh
    # The flags the Job passes are the script's (the kiln package is in .venv, as in the image).
    out = subprocess.run([os.environ.get("KILN_PYTHON", sys.executable), str(EXAMPLE_SCRIPT), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for flag in flags:
        assert flag in out.stdout, f"train.py has no flag {flag}"


# ---- A small fleet from the rendered small overlay, on this machine. ----


class Pod:
    """One container of a rendered workload, run here: each volume is a directory under tmp (a
    ConfigMap's files written into it, a Secret's from `secret_files`), and every string that
    names a mount path (args, env values, mounted config files) is rewritten to that directory."""

    def __init__(self, objects, workload, tmp: Path, secret_files: dict[str, dict[str, str]]):
        self.workload = workload
        spec = workload["spec"]["template"]["spec"]
        self.container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.mounts: dict[str, Path] = {}
        for m in self.container.get("volumeMounts", []):
            d = tmp / workload["metadata"]["name"] / m["name"]
            d.mkdir(parents=True)
            self.mounts[m["mountPath"]] = d
        for m in self.container.get("volumeMounts", []):
            v = volumes.get(m["name"], {})
            d = self.mounts[m["mountPath"]]
            if "configMap" in v:
                for key, text in one(objects, "ConfigMap", v["configMap"]["name"])["data"].items():
                    (d / key).write_text(self.localize(text))
            elif "secret" in v:
                for key, text in secret_files[v["secret"]["secretName"]].items():
                    (d / key).write_text(text)

    def localize(self, text: str) -> str:
        """One pass, so that a replacement (under /tmp) is never rewritten again by the /tmp mount."""
        paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        pattern = rf"(?:^|(?<=[\s\"'@=])|(?<=unix://))({paths})(?=[/\"'\s]|$)"
        return re.sub(pattern, lambda m: str(self.mounts[m.group(1)]), text, flags=re.M)

    def argv(self, bins: Path | None, *extra: str) -> list[str]:
        command = self.container["command"]
        exe = str(bins / command[0]) if bins else command[0]
        return [exe, *(self.localize(a) for a in command[1:] + self.container.get("args", [])), *extra]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KILN_CACHE_", "KILN_REMOTE"))}
        env.update({k: self.localize(v) for k, v in env_of(self.container).items() if v is not None})
        return env

    def exec_probe(self, kind: str, bins: Path) -> subprocess.CompletedProcess:
        probe = self.container[kind]
        command = [self.localize(a) for a in probe["exec"]["command"]]
        command[0] = str(bins / command[0])
        return subprocess.run(command, capture_output=True, text=True, timeout=probe.get("timeoutSeconds", 1))


def wait_for(what: str, check, seconds: float, procs=()):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for p in procs:
            assert p.poll() is None, f"{what}: {p.args[0]} exited with {p.returncode}"
        result = check()
        if result:
            return result
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def grpc_health(target: str, service: str) -> bool:
    """What a Kubernetes gRPC probe asks: grpc.health.v1.Health/Check for `service`, plain
    HTTP/2. The messages are written by hand (field 1 of each) so the test needs no health stubs."""
    import grpc

    name = service.encode()
    request = b"\n" + bytes([len(name)]) + name
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            response = check(request, timeout=2)
        except grpc.RpcError:
            return False
    return response == b"\x08\x01"  # status = SERVING


def http_get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode() if r.status == 200 else None
    except OSError:
        return None


def stop(proc: subprocess.Popen, grace: float) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{proc.args[0]} did not stop within {grace} s of SIGTERM")


def test_a_small_fleet_runs_from_the_rendered_overlay(tmp_path: Path):
    bins = bin_dir()
    for var in ("KILN_CUDA_ROOT", "KILN_PYTHON"):
        assert os.environ.get(var), f"{var} is not set (scripts/lib/setup.sh ensure_venv sets it)"
    redis_server = shutil.which("redis-server")
    assert redis_server, "redis-server is missing (ensure_redis installs it)"
    objects = render(KUBE / "overlays/small")
    token = "write:" + secrets.token_hex(16)
    secret_files = {
        "kiln-cache-tokens": {"tokens": token + "\n"},
        "kilnd-token": {"token": token.removeprefix("write:") + "\n"},
    }
    redis = Pod(objects, one(objects, "StatefulSet", "kiln-redis"), tmp_path, secret_files)
    cache = Pod(objects, one(objects, "Deployment", "kiln-cache"), tmp_path, secret_files)
    kilnd = Pod(objects, one(objects, "DaemonSet", "kilnd"), tmp_path, secret_files)
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "w")
        p = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(p)
        return p

    try:
        # Redis with the rendered redis.conf; only where it listens and writes is changed here.
        rport = free_port()
        argv = redis.argv(None, "--port", str(rport), "--bind", "127.0.0.1", "--save", "")
        argv[0] = redis_server
        redis_proc = start("redis", argv, os.environ.copy())
        cli = ["redis-cli", "-p", str(rport)]

        def ping() -> bool:
            return subprocess.run([*cli, "ping"], capture_output=True, text=True).stdout.strip() == "PONG"

        wait_for("Redis", ping, 20, [redis_proc])
        got = subprocess.run([*cli, "config", "get", "maxmemory*"], capture_output=True, text=True).stdout.split()
        config = dict(zip(got[::2], got[1::2]))
        assert config["maxmemory-policy"] == "allkeys-lru" and int(config["maxmemory"]) > 0, config

        # kiln-cache with the rendered config file, env and tokens Secret; addresses by flag.
        grpc_port, cache_metrics = free_port(), free_port()
        argv = cache.argv(bins, "--listen", f"127.0.0.1:{grpc_port}", "--metrics", f"127.0.0.1:{cache_metrics}",
                          "--redis", f"redis://127.0.0.1:{rport}")
        cache_proc = start("kiln-cache", argv, cache.env())
        ready = cache.container["readinessProbe"]["grpc"]
        wait_for("kiln-cache's readiness probe (gRPC health: Redis answers)",
                 lambda: grpc_health(f"127.0.0.1:{grpc_port}", ready["service"]), 30, [cache_proc])
        socket.create_connection(("127.0.0.1", grpc_port), timeout=2).close()  # its liveness probe

        # kilnd with the rendered config file (its socket and disk tier under the mounted
        # directories), env and token Secret; the image's paths and the addresses by flag.
        kilnd_metrics = free_port()
        argv = kilnd.argv(bins, "--metrics", f"127.0.0.1:{kilnd_metrics}", "--remote", f"http://127.0.0.1:{grpc_port}",
                          "--cuda-root", os.environ["KILN_CUDA_ROOT"], "--python", os.environ["KILN_PYTHON"],
                          "--target", "sm_90")
        kilnd_proc = start("kilnd", argv, kilnd.env())
        startup = kilnd.container["startupProbe"]
        wait_for("kilnd's startup probe", lambda: kilnd.exec_probe("startupProbe", bins).returncode == 0,
                 min(60, startup["periodSeconds"] * startup["failureThreshold"]), [kilnd_proc, cache_proc])
        for kind in ("readinessProbe", "livenessProbe"):
            result = kilnd.exec_probe(kind, bins)
            assert result.returncode == 0, f"kilnd's {kind}: {result.stderr}"
        socket_path = Path(tomllib.loads((kilnd.mounts["/etc/kiln/config"] / "kilnd.toml").read_text())["socket"])
        assert socket_path.parent == kilnd.mounts["/run/kiln"] and socket_path.is_socket()
        assert socket_path.stat().st_mode & 0o777 == 0o660

        # A job's compile through the socket, as the example Job's KILN_DAEMON names it.
        job = one(render(KUBE / "job"), "Job", "kiln-train-example")
        daemon = env_of(job["spec"]["template"]["spec"]["containers"][0])["KILN_DAEMON"]
        daemon = "unix://" + kilnd.localize(daemon.removeprefix("unix://"))
        out = subprocess.run([str(bins / "kiln"), "compile", "--daemon", daemon, "--target", "sm_90", "--json",
                              str(ROOT / "examples/cuda/vector_add.cu")], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        first = json.loads(out.stdout.splitlines()[0])
        assert (first["outcome"], first["tier"]) == ("ok", "compiled"), out.stdout
        # The example Job's script (no GPU here: it compiles both kernels and says so).
        out = subprocess.run([os.environ["KILN_PYTHON"], str(EXAMPLE_SCRIPT)], env={**os.environ, "KILN_DAEMON": daemon},
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and "kilnd: 2 kernels in" in out.stdout, out.stdout + out.stderr

        # kilnd reached the fleet cache with the token from its Secret, and published there.
        kilnd_text = lambda: http_get(f"http://127.0.0.1:{kilnd_metrics}/metrics") or ""  # noqa: E731
        wait_for("kiln_remote_up 1 on kilnd", lambda: re.search(r"^kiln_remote_up 1$", kilnd_text(), re.M), 30)
        cache_text = lambda: http_get(f"http://127.0.0.1:{cache_metrics}/metrics") or ""  # noqa: E731
        puts = r'^kiln_server_requests_total\{op="Put",code="ok"\} [1-9]'
        wait_for("a put on kiln-cache", lambda: re.search(puts, cache_text(), re.M), 30)

        grace = kilnd.workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert stop(kilnd_proc, grace) == 0
        assert not socket_path.exists(), "kilnd left its socket behind"
        grace = cache.workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert stop(cache_proc, grace) == 0
    except BaseException:
        for name in ("redis", "kiln-cache", "kilnd"):
            log = logs / f"{name}.log"
            if log.exists():
                print(f"---- {name} ----\n{log.read_text()[-4000:]}")
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
