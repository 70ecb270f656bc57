"""kiln's set-up of this process's Inductor for the graph path (:mod:`kiln.torch._inductor`), with
a real torch on the CPU: what an async job leaves out of ``torch.compile()`` and does off the
training thread instead, and what a swap at a call waits for."""

from __future__ import annotations

from harness import require

torch = require("torch")


def test_an_async_job_s_torch_compile_reads_inductor_s_config_only_when_asked() -> None:
    """torch.compile() imports Inductor's compile_fx (seconds) only to keep its config for a public
    API: an async job's torch.compile() leaves it to the first read, which gives torch's own dict."""
    import pickle

    import torch

    from kiln.torch import _inductor

    reads: list[int] = []
    config = _inductor.DeferredConfig(lambda: reads.append(1) or {"max_autotune": False, "triton.cudagraphs": True})
    assert reads == []
    assert dict(config) == {"max_autotune": False, "triton.cudagraphs": True} and config["max_autotune"] is False
    assert len(config) == 2 and "triton.cudagraphs" in config and reads == [1]
    # Pickled (torch pickles a compiled function's context with it) as the dict torch would keep.
    assert pickle.loads(pickle.dumps(config)) == dict(config) and type(pickle.loads(pickle.dumps(config))) is dict
    wrapper = torch._TorchCompileInductorWrapper
    original = wrapper.get_compiler_config
    try:
        _inductor.defer_compile_fx(torch)
        deferring = wrapper.get_compiler_config
        _inductor.defer_compile_fx(torch)  # idempotent
        assert wrapper.get_compiler_config is deferring
        inductor = wrapper("default", None, False)
        assert isinstance(inductor.get_compiler_config(), _inductor.DeferredConfig)
        assert dict(inductor.get_compiler_config()) == original(inductor)
    finally:
        wrapper.get_compiler_config = original


def test_prepare_imports_compile_fx_and_computes_torch_s_source_keys_once() -> None:
    """What an async graph's first load would do on the training thread, done ahead on another:
    compile_fx imported, and torch's and Triton's source keys memoized for every cache lookup."""
    import sys

    from torch._inductor.runtime import triton_compat

    from kiln.torch import _inductor

    assert not _inductor.prepared()
    try:
        _inductor.prepare()
        assert _inductor.prepared() and "torch._inductor.compile_fx" in sys.modules
        from torch._inductor.codecache import torch_key

        # Memoized: torch's own memo (a list in its closure) holds the value, which every cache
        # lookup reads without hashing.
        memo = next(c.cell_contents for c in torch_key.__closure__ or () if isinstance(c.cell_contents, list))
        assert len(memo) == 1 and isinstance(memo[0], bytes), memo
        if triton_compat.HAS_TRITON:
            assert triton_compat.triton_key.cache_info().currsize == 1
    finally:
        _inductor._prepared.clear()


def test_a_swap_at_a_call_waits_for_the_cpu_vector_pick_to_end_not_in_the_step() -> None:
    """A CPU graph's load waits for Inductor's pick of the CPU's vector instructions (seconds of
    subprocesses). An async graph swapped on the training thread swaps only once the pick has
    ended, and runs eagerly meanwhile: a DDP piece's swap on a 2-core host had joined the pick and
    stalled its step 23 s. A graph on no CPU never waits for it."""
    import threading

    import torch

    from kiln.torch import _inductor

    release = threading.Event()
    pick = threading.Thread(target=release.wait, daemon=True)
    pick.start()
    saved = _inductor._vec_isa_pick
    _inductor._vec_isa_pick = pick
    try:
        cpu, meta = [torch.zeros(2)], [torch.zeros(2, device="meta")]
        assert not _inductor.vec_isa_ready(cpu)
        assert _inductor.vec_isa_ready(meta) and _inductor.vec_isa_ready([])
        release.set()
        pick.join()
        assert _inductor.vec_isa_ready(cpu)
    finally:
        _inductor._vec_isa_pick = saved
