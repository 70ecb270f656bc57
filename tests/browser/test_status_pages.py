"""The status pages in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by Selenium, against a real redis-server, kiln-cache and kilnd that compile with the real
NVRTC, so the pages show real hits and misses.

Checks that the figures on kiln-cache's fleet page and kilnd's host page are those of their
/metrics, that every host that reported is listed (the one whose fingerprint differs from the
fleet's flagged), that a hostile host's markup is shown as text, that both pages work with
JavaScript off, and that a screenshot of each reads back as a PNG of the window's size that is
not blank. Set KILN_SCREENSHOT_DIR to keep the screenshots (docs/status-page.png came from here).

Run by scripts/test; by hand: KILN_BIN_DIR=target/debug .venv/bin/python -m pytest tests/browser
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client" / "python" / "tests"))
from harness import WRITE_TOKEN, CacheServer, Kilnd, MissingComponent, Redis, http_get  # noqa: E402

import kiln  # noqa: E402

WIDTH, HEIGHT = 1200, 1000
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def _webdriver() -> Any:
    try:
        from selenium import webdriver
    except ImportError as e:
        raise MissingComponent("selenium is missing from .venv: run scripts/test, which installs it pinned") from e
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise MissingComponent(f"{path} is missing: run scripts/test (ensure_chromium installs chromium and chromium-driver)")
    return webdriver


@pytest.fixture
def browser_factory() -> Iterator[Callable[[bool], Any]]:
    """Starts Chromium with JavaScript on or off, each with a fresh profile; quits them after."""
    webdriver = _webdriver()
    from selenium.webdriver.chrome.service import Service

    started: list[tuple[Any, str]] = []

    def start(javascript: bool) -> Any:
        profile = tempfile.mkdtemp(prefix="kiln-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--user-data-dir={profile}",
        ):
            options.add_argument(flag)
        if not javascript:
            options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
        driver.set_page_load_timeout(30)
        # The viewport, hence the screenshot, at exactly WIDTH x HEIGHT (the window's size
        # includes what headless Chromium keeps for its own frame).
        metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        started.append((driver, profile))
        return driver

    yield start
    for driver, profile in started:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CacheServer, Kilnd]]:
    d = tmp_path_factory.mktemp("status")
    redis = Redis(d / "redis")
    cache = CacheServer(d / "kiln-cache", redis)
    # No memory tier: removing the disk cache makes the next compile read the fleet. No audit: its
    # recompile reads the fleet once more, later, which would move the counts the pages are
    # compared on (tests/tests/audit.rs tests the audit).
    kilnd = Kilnd(d / "kilnd", remote=cache, config="memory_cache_mb = 0\naudit = false\n")
    yield cache, kilnd
    kilnd.stop()
    cache.stop()
    redis.kill9()


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of every series of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


def eventually(what: str, check: Callable[[], bool], bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {bound:.0f} s")


# ---- a hostile host's report, encoded by hand (the Python package has no kiln-cache stubs) ----


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def host_report(host: str, fingerprint: str, text: str) -> bytes:
    """A HostReport (cache.proto) whose free-text fields all hold `text`."""
    gpu = _field(1, text) + _field(2, "sm_90")
    toolchain = _field(1, "nvrtc") + _field(2, text) + _field(3, fingerprint)
    miss = _field(1, int(time.time() * 1000)) + _field(2, text) + _field(3, "nvrtc") + _field(4, "source") + _field(5, text)
    return (
        _field(1, host) + _field(2, text) + _field(3, gpu) + _field(4, "sm_90") + _field(5, toolchain) + _field(6, 3) + _field(9, miss)
    )


def report_host(cache: CacheServer, body: bytes) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{cache.port}") as channel:
        call = channel.unary_unary("/kiln.v1.ArtifactCache/ReportHost")
        call(body, metadata=[("authorization", f"Bearer {WRITE_TOKEN}")], timeout=10)


# ---- screenshots ----


def check_png(path: Path) -> None:
    """A PNG of the window's size whose pixels are not all one colour."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (WIDTH, HEIGHT), f"{path}: {width}x{height}, expected {WIDTH}x{HEIGHT}"
    idat, pos = b"", 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    pixels = zlib.decompress(idat)
    assert len(set(pixels)) > 16, f"{path} looks blank: {len(set(pixels))} distinct byte values"


def screenshot(driver: Any, name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), "Chromium took no screenshot"
    check_png(path)
    keep = os.environ.get("KILN_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


def text_of(driver: Any, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, element_id).text).strip()


def scripted(driver: Any) -> bool:
    """Whether the page's one script ran (it marks <html data-js="on">), read from the page
    source, which needs no script of the test's own."""
    return 'data-js="on"' in str(driver.page_source)


def test_status_pages_in_chromium(fleet: tuple[CacheServer, Kilnd], browser_factory: Callable[[bool], Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    cache, kilnd = fleet
    tag = uuid.uuid4().hex
    kernels = [kiln.cuda_kernel(f"k{i}", f'extern "C" __global__ void k{i}(float* x) {{ x[0] = {i}.0f; /* {tag} */ }}') for i in range(2)]
    with kiln.Client(kilnd.uri) as client:
        cold = client.compile(kernels, target="sm_90", timeout=300)
        assert [r.tier for r in cold.kernels] == [kiln.Tier.COMPILED] * 2, cold.kernels
        shutil.rmtree(kilnd.dir / "cache" / "v1")
        warm = client.compile(kernels, target="sm_90", timeout=300)
        assert [r.tier for r in warm.kernels] == [kiln.Tier.REMOTE] * 2, warm.kernels
        failed = client.compile([kiln.cuda_kernel("bad", f'extern "C" __global__ void k() {{ nope; /* {tag} */ }}')], target="sm_90")
        assert not failed.kernels[0].ok

    # The real host, a twin with its fingerprint, and a hostile host whose differs.
    real = json.loads(http_get(kilnd.metrics_port, "/status.json"))
    fingerprint = next(t["fingerprint"] for t in real["toolchains"] if t["name"] == "nvrtc")
    evil = "<script>document.title=1</script><img src=x onerror=alert(1)>"
    report_host(cache, host_report("twin-host", fingerprint, "twin"))
    report_host(cache, host_report("evil-host", "e" * 64, evil))
    with pytest.raises(grpc.RpcError) as refused:
        report_host(cache, host_report("<b>bad</b>", fingerprint, "x"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details().startswith("host:")

    # Two torch.compile jobs' accounts through kilnd to the fleet ledger: one that pays, and one
    # with a hostile name whose processes ended before its compile paid.
    from kiln.torch.results import TorchGraphCost

    def graph(eager: float, compiled: float, calls: int, compile_s: float) -> TorchGraphCost:
        return TorchGraphCost("forward", calls // 2, calls - calls // 2, eager, compiled, compile_s, served="in-process",
                              eager_samples=calls // 2, compiled_samples=calls - calls // 2)

    losing = f"<i>{tag}</i>"
    with kiln.Client(kilnd.uri) as client:
        client.report_torch_graphs("pays", {}, [graph(0.02, 0.01, 4000, 10.0)], process="pays-000001")
        client.report_torch_graphs("pays", {}, [graph(0.02, 0.01, 2000, 0.0)], process="pays-000002")
        time.sleep(0.05)  # the index orders by the report's millisecond
        for process in ("lose-000001", "lose-000002"):
            client.report_torch_graphs(losing, {}, [graph(0.02, 0.01, 20, 15.5)], process=process, ended=True)
        jobs = client.torch_jobs()
    assert jobs.source == "fleet" and [j.job for j in jobs.jobs][:2] == [losing, "pays"], jobs
    pays = jobs.jobs[1]
    assert (pays.steps, pays.processes, pays.break_even_steps) == (6000, 2, pytest.approx(1000.0)), pays

    # kiln-cache flushes its counts every 2 s and caches a page for 2 s: wait until the page's
    # JSON agrees with /metrics, then read the HTML.
    cache_metrics = http_get(cache.metrics_port, "/metrics")
    hits = int(metric_sum(cache_metrics, "kiln_server_lookups_total", result="hit"))
    misses = int(metric_sum(cache_metrics, "kiln_server_lookups_total", result="miss"))
    assert hits >= 2 and misses >= 2, cache_metrics

    def status() -> dict[str, Any]:
        return dict(json.loads(http_get(cache.metrics_port, "/status.json")))

    eventually("fleet page counts match /metrics", lambda: (status()["lookups"]["hits"], status()["lookups"]["misses"]) == (hits, misses))
    eventually("three hosts listed", lambda: len(status()["hosts"]) == 3)

    # The real kilnd is known by its host name and its socket (two kilnds of one machine are two
    # rows); the reports made here name no instance, so they are known by their host alone.
    real_kilnd = next(h for h in status()["hosts"] if h["report"]["host"] not in ("twin-host", "evil-host"))
    hostname = real_kilnd["daemon"]
    assert hostname == f"{real_kilnd['report']['host']} {kilnd.socket}", real_kilnd["daemon"]
    # kilnd's own misses (its MissLog) reach the fleet page with its next report (every 10 s).
    eventually("the host's misses on the fleet page", lambda: any(m["daemon"] == hostname for m in status()["recent_misses"]), 25)
    for javascript in (False, True):
        driver = browser_factory(javascript)
        driver.get(f"http://127.0.0.1:{cache.metrics_port}/")
        assert scripted(driver) == javascript, "JavaScript was not as configured"
        assert driver.title == "kiln fleet", "a hostile report changed the page"
        assert text_of(driver, "fleet-hits") == str(hits)
        assert text_of(driver, "fleet-misses") == str(misses)
        assert text_of(driver, "host-count") == "3"
        assert text_of(driver, "kilnd-count") == "3"
        assert text_of(driver, "class-hits-nvrtc") == str(hits)
        assert text_of(driver, "hit-rate") == f"{100 * hits / (hits + misses + int(metric_sum(cache_metrics, 'kiln_server_lookups_total', result='negative'))):.1f}%"
        rows = driver.find_elements(By.CSS_SELECTOR, "#hosts tr[data-key]")
        assert sorted(r.get_dom_attribute("data-key") for r in rows) == sorted([hostname, "twin-host", "evil-host"])
        flagged = driver.find_elements(By.CSS_SELECTOR, "#hosts tr.flag")
        assert [r.get_dom_attribute("data-key") for r in flagged] == ["evil-host"]
        # The hostile text is on the page as text, and made no element.
        body = driver.find_element(By.TAG_NAME, "body").text
        assert evil in body
        assert not driver.find_elements(By.CSS_SELECTOR, "img"), "a host's markup became an element"
        assert len(driver.find_elements(By.TAG_NAME, "script")) == 1
        # The torch.compile jobs: the fleet ledger's rows, most recently reported first, the job
        # whose compile never paid flagged, its name shown as text.
        rows = driver.find_elements(By.CSS_SELECTOR, "#torch-jobs tr[data-key]")
        assert [r.get_dom_attribute("data-key") for r in rows][:2] == [losing, "pays"]
        assert [r.get_dom_attribute("class") for r in rows[:2]] == ["flag", None]
        assert text_of(driver, "torch-job-1-speedup") == "2.00×"
        assert text_of(driver, "torch-job-1-steps") == "6000"
        assert text_of(driver, "torch-job-1-break-even") == "1,000"
        assert text_of(driver, "torch-job-1-compile-paid") == "10.0"
        assert text_of(driver, "torch-job-1-processes") == "2"
        assert text_of(driver, "torch-job-0-compile-paid") == "31.0"
        assert text_of(driver, "torch-job-0-verdict").startswith("this job compiled for 31 s and ran 40 steps: run it eagerly")
        assert losing in rows[0].text and not driver.find_elements(By.CSS_SELECTOR, "#torch-jobs i")
        screenshot(driver, f"status-page{'' if javascript else '-nojs'}.png", tmp_path)

        kilnd_metrics = kilnd.metrics()
        driver.get(f"http://127.0.0.1:{kilnd.metrics_port}/")
        assert scripted(driver) == javascript
        for tier in ("disk", "remote"):
            for result, label in (("hit", "hits"), ("miss", "misses")):
                expected = int(metric_sum(kilnd_metrics, "kiln_cache_lookups_total", tier=tier, result=result))
                assert text_of(driver, f"tier-{label}-{tier}") == str(expected), (tier, result)
        assert text_of(driver, "tier-hits-remote") == "2"
        assert text_of(driver, "fleet") == "reachable"
        assert text_of(driver, "lease-acquired") == str(int(metric_sum(kilnd_metrics, "kiln_lease_total", result="acquired")))
        assert "torch.compile graphs" in [h.text for h in driver.find_elements(By.TAG_NAME, "h2")]
        assert text_of(driver, "torch-graphs-compiled") == str(int(metric_sum(kilnd_metrics, "kiln_torch_graphs_total", result="compiled")))
        toolchains = {r.get_dom_attribute("data-key") for r in driver.find_elements(By.CSS_SELECTOR, "#toolchains tr[data-key]")}
        assert {"nvrtc", "ptxas", "triton"} <= toolchains
        assert fingerprint in driver.find_element(By.ID, "toolchains").text
        assert len(driver.find_elements(By.CSS_SELECTOR, "#misses tr")) == 1 + len(real["recentMisses"]) >= 4
        screenshot(driver, f"host-page{'' if javascript else '-nojs'}.png", tmp_path)
