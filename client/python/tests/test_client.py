"""kiln.Client against a real kilnd: the Compiler service, typed results, and errors that carry
the gRPC status and message."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from harness import REPO

import kiln
from kiln import paths

EXAMPLES = REPO / "examples"


def unique_cuda(tag: str) -> str:
    """A CUDA kernel no earlier run has compiled (so its tier is `compiled` once)."""
    return f'extern "C" __global__ void k(float* x) {{ x[0] = {len(tag)}.0f; /* {tag} */ }}'


def test_paths_follow_the_daemon_rule() -> None:
    assert paths.socket_path_for("/run/user/7", 7) == "/run/user/7/kiln/kilnd.sock"
    assert paths.socket_path_for(None, 0) == "/run/kiln/kilnd.sock"
    assert paths.socket_path_for("", 1000) == "/tmp/kiln-1000/kilnd.sock"
    assert paths.daemon_uri({"KILN_DAEMON": "http://h:1"}) == "http://h:1"
    assert paths.daemon_uri({"XDG_RUNTIME_DIR": "/x"}) == "unix:///x/kiln/kilnd.sock"
    assert paths.grpc_target("unix:///a/b.sock") == ("unix:///a/b.sock", False)
    assert paths.grpc_target("http://127.0.0.1:7") == ("127.0.0.1:7", False)
    assert paths.grpc_target("https://h:7") == ("h:7", True)
    with pytest.raises(ValueError, match="expected"):
        paths.grpc_target("ftp://h")


def test_stats_name_the_toolchains_and_target(client: kiln.Client) -> None:
    stats = client.stats()
    assert {t.name for t in stats.toolchains} == {"nvrtc", "ptxas", "triton"}
    # Triton's fingerprint is known once its workers start (lazily).
    assert all(len(t.fingerprint) == 64 for t in stats.toolchains if t.name != "triton")
    assert stats.default_target == "sm_90"
    assert stats.remote.startswith("http://127.0.0.1:") and stats.remote_up
    assert {t.tier for t in stats.tiers} >= {"memory", "disk"}


def test_compile_cuda_then_hit_from_memory(client: kiln.Client) -> None:
    graph = kiln.Graph([kiln.cuda_kernel("k", unique_cuda(uuid.uuid4().hex))], target="sm_90", name="python-test")
    events: list[kiln.Event] = []
    first = client.compile(graph, on_event=events.append)
    assert first.done and first.all_ok and len(first.kernels) == 1
    k = first["k"]
    assert k.tier == kiln.Tier.COMPILED and k.outcome == kiln.Outcome.OK and str(k.tier) == "compiled"
    assert k.artifact[:4] == b"\x7fELF" and k.artifact_bytes == len(k.artifact)
    assert k.toolchain == "nvrtc" and k.target == "sm_90" and len(k.key) == 64
    # No GPU here: kilnd says why the cubin was not loaded, and has no driver attributes.
    assert k.validation.startswith("not validated") and k.attributes == []
    assert first.kernel_keys == [k.key] and len(first.graph_key) == 64
    assert isinstance(events[0], kiln.Queued) and isinstance(events[-1], kiln.JobDone)
    second = client.compile(graph)
    assert second["k"].tier == kiln.Tier.MEMORY and second["k"].artifact == k.artifact
    assert second.graph_key == first.graph_key


def test_a_kernel_that_does_not_compile_is_a_failed_result_with_the_log(client: kiln.Client) -> None:
    result = client.compile([kiln.cuda_kernel("bad", 'extern "C" __global__ void k() { nope; }')], target="sm_90")
    bad = result["bad"]
    assert bad.outcome == kiln.Outcome.FAILED and not bad.ok and "nope" in bad.log
    assert result.failed == 1 and not result.all_ok


def test_lookup_misses_then_hits(client: kiln.Client) -> None:
    graph = kiln.Graph([kiln.cuda_kernel("k", unique_cuda(uuid.uuid4().hex))], target="sm_90")
    assert client.lookup(graph)["k"].outcome == kiln.Outcome.MISS
    client.compile(graph, omit_artifacts=True)
    hit = client.lookup(graph)["k"]
    assert hit.outcome == kiln.Outcome.OK and hit.tier == kiln.Tier.MEMORY and hit.artifact


def test_submit_then_watch(client: kiln.Client) -> None:
    graph = kiln.Graph([kiln.cuda_kernel("k", unique_cuda(uuid.uuid4().hex))], target="sm_90")
    job = client.submit(graph)
    assert job
    result = client.watch(job, timeout=120)
    assert result.job_id == job and result.all_ok and result["k"].artifact[:4] == b"\x7fELF"


def test_ptx_and_triton_in_one_graph(client: kiln.Client) -> None:
    source = (EXAMPLES / "triton" / "kernels.py").read_text()
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    graph = kiln.Graph(
        [
            kiln.ptx_kernel("ptx_add", (EXAMPLES / "ptx" / "vector_add.ptx").read_text()),
            kiln.triton_kernel(
                "tri_add",
                source,
                "add_kernel",
                sig,
                {"BLOCK": 256},
                attributes=[(i, "tt.divisibility", 16) for i in range(4)],
                num_warps=4,
                want_ptx=True,
            ),
        ],
        target="sm_90",
    )
    result = client.compile(graph, timeout=300)
    assert result.all_ok, [(k.id, k.log) for k in result.kernels]
    tri = result["tri_add"]
    assert tri.toolchain == "triton" and tri.artifact[:4] == b"\x7fELF" and ".version" in tri.ptx
    assert tri.metadata["num_warps"] == 4
    assert result["ptx_add"].toolchain == "ptxas"


def test_triton_constexprs_keep_their_type() -> None:
    src = "import triton\n"
    as_int = kiln.triton_kernel("a", src, "k", [("B", "constexpr")], {"B": 1024}).to_proto()
    as_float = kiln.triton_kernel("a", src, "k", [("B", "constexpr")], {"B": 1024.0}).to_proto()
    as_bool = kiln.triton_kernel("a", src, "k", [("B", "constexpr")], {"B": True}).to_proto()
    assert as_int.triton.constexprs[0].WhichOneof("value") == "int_value"
    assert as_float.triton.constexprs[0].WhichOneof("value") == "float_value"
    assert as_bool.triton.constexprs[0].WhichOneof("value") == "bool_value"
    with pytest.raises(TypeError, match="constexpr 'B'"):
        kiln.triton_kernel("a", src, "k", [("B", "constexpr")], {"B": [1]})  # type: ignore[dict-item]
    sig = kiln.triton_kernel("a", src, "k", [("z", "i32"), ("a", "i32")]).to_proto().triton.signature
    assert [a.name for a in sig] == ["z", "a"], "the signature keeps its order"


def test_invalid_graph_is_invalid_argument_naming_the_field(client: kiln.Client) -> None:
    with pytest.raises(kiln.InvalidArgument) as e:
        client.compile([kiln.cuda_kernel("a", "x"), kiln.cuda_kernel("a", "y")], target="sm_90")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "kernels[1]" in e.value.details or "duplicate" in e.value.details.lower(), e.value.details
    with pytest.raises(kiln.InvalidArgument) as e:
        client.compile([kiln.cuda_kernel("a", unique_cuda("x"))], target="sm_9x")
    assert "target" in e.value.details


def test_invalid_blob_namespace_is_invalid_argument_naming_the_field(client: kiln.Client) -> None:
    with pytest.raises(kiln.InvalidArgument) as e:
        client.get_blobs("Not A Namespace", "1", [b"k"])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details.startswith("scope.namespace:"), e.value.details
    assert isinstance(e.value, kiln.KilnError) and "INVALID_ARGUMENT" in str(e.value)
    with pytest.raises(kiln.InvalidArgument, match="keys"):
        client.get_blobs("python-test", "1", [])


def test_unknown_job_is_an_error_with_its_code(client: kiln.Client) -> None:
    with pytest.raises(kiln.KilnError) as e:
        client.watch("no-such-job", timeout=10)
    assert e.value.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), e.value


def test_a_dead_socket_is_daemon_unavailable_and_says_where(tmp_path) -> None:
    uri = f"unix://{tmp_path}/nobody-here.sock"
    started = time.monotonic()
    with kiln.Client(uri) as c, pytest.raises(kiln.DaemonUnavailable) as e:
        c.stats(timeout=10)
    assert time.monotonic() - started < 5, "a dead socket must fail fast, not wait for the deadline"
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert uri in str(e.value) and "kilnd" in str(e.value)


def test_an_rpc_error_keeps_its_cause(tmp_path) -> None:
    # The grpc.RpcError behind a KilnError stays reachable (`raise ... from e`), for debugging.
    c = kiln.Client(f"unix://{tmp_path}/nobody.sock", timeout=2)
    with pytest.raises(kiln.KilnError) as info:
        c.stats()
    assert isinstance(info.value.__cause__, grpc.RpcError)


def test_explain_names_the_option_that_changed_without_compiling(client: kiln.Client) -> None:
    source = unique_cuda(uuid.uuid4().hex)
    graph = kiln.Graph([kiln.cuda_kernel("k", source)], target="sm_90", name="python-explain")
    [never] = client.explain(graph)
    assert not never.cached and never.reason == "new" and never.verdict == "miss: never compiled under this identity"
    assert (never.graph, never.kernel_id, never.kernel_name) == ("python-explain", "k", "")
    done = client.compile(graph)
    assert done["k"].tier == kiln.Tier.COMPILED
    [hit] = client.explain(graph)
    assert hit.cached and hit.tier == kiln.Tier.MEMORY and hit.key == done["k"].key and hit.differences == []
    fast = kiln.Graph([kiln.cuda_kernel("k", source, options=["--use_fast_math"])], target="sm_90", name="python-explain")
    [changed] = client.explain(fast)
    assert not changed.cached and changed.reason == "options" and changed.nearest_from == "local"
    assert changed.differences == [kiln.Difference("options", "options: --use_fast_math added")]
    # Nothing was compiled: the changed kernel is still a miss for lookup.
    assert client.lookup(fast)["k"].outcome == kiln.Outcome.MISS
    [by_key] = client.explain(keys=[done["k"].key])
    assert by_key.cached and by_key.key == done["k"].key
    with pytest.raises(kiln.InvalidArgument, match="keys"):
        client.explain(graph, keys=[done["k"].key])
