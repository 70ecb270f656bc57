"""The corpus of job shapes (``tests/corpus``) through kiln's default (``KILN_TORCH=1``: every
graph goes to kilnd), on the CPU with a real torch: gloo for DDP and FSDP2, Inductor's C++
backend; and async (``KILN_TORCH_ASYNC=1``), the shapes with a graph that cannot travel.

Each case runs once (the bench and the GPU run take the whole matrix against plain
torch.compile, timed). Asserted for each: every graph went through kilnd or
fell back for a reason the README names (dynamic shapes cannot travel); each distinct graph was
claimed and compiled through kilnd by one rank at most (another rank loaded it, or compiled it
for itself as torch would: a rank waits for nobody, so ``late`` is never counted); every graph's
cost is charged, every process printed its line at exit; and the losses are eager torch's,
within the tolerance of a compiled graph (bf16 autocast: 2e-2 relative; float32: 1e-4).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import Kilnd, require

import kiln

sys.path.insert(0, str(Path(__file__).with_name("corpus")))
import runner  # noqa: E402 - the corpus's directory is put on the path first

torch = require("torch")

#: (shape, layout, ranks, the fallbacks the README names for it): every shape of the corpus once,
#: and every layout: a compiled model and train step, checkpointing inside the compiled region,
#: a compiled loss function with a graph break and sliced inputs and gradient accumulation under
#: DDP, per-block compiles under FSDP2, a compiled optimizer step, dynamic shapes, a KV-cache
#: decode loop, a convnet trained and evaluated in turns, a Hugging Face model, a GAN, a GPT with
#: tied weights and complex rotary embeddings, a LoRA-tuned mixture of experts, flex_attention,
#: compiled autograd, a compiled optimizer under a learning-rate schedule, an operator of the
#: job's own. The whole matrix
#: of shapes and layouts runs on the GPU.
CASES = [
    ("model_compile", "single", 1, set()),
    ("train_step_compile", "single", 1, set()),
    ("checkpoint", "single", 1, set()),
    ("loss_compile", "ddp", 2, set()),
    ("accumulate", "ddp", 2, set()),
    ("block_compile", "fsdp2", 2, set()),
    # The compiled optimizer step: its graph takes the parameters with their gradients and holds
    # the optimizer's state as constants, which travel at this size (past 64 MiB of them it
    # falls back, named: the async case below).
    ("optimizer_compile", "single", 1, set()),
    # A dimension that changed between calls is dynamic: a graph with a symbolic input cannot
    # travel, and compiles in the process as torch would.
    ("dynamic", "single", 1, {"unserializable"}),
    ("decode", "single", 1, {"unserializable"}),
    # Batch norm's running statistics mutated by the graph, and a second graph of the same model
    # in eval mode under no_grad, the two called in turns.
    ("convnet_eval", "single", 1, set()),
    # A model nobody here wrote: Hugging Face's LlamaForCausalLM from its config.
    ("hf_llama", "single", 1, set()),
    # Two compiled models trained against each other: the discriminator traced again for inputs
    # that need grad, once its parameters hold gradients.
    ("gan", "single", 1, set()),
    # A GPT as nanoGPT and Meta's reference code write one, under DDP's pieces: a weight tied
    # between embedding and head, a complex64 buffer, torch's own encoder layer, a custom
    # autograd.Function, a keyword input and a dict output.
    ("gpt_tied", "ddp", 2, set()),
    # A mixture of experts fine-tuned with LoRA: frozen base weights, routing by topk, batch
    # norm's statistics updated in training, and a .tolist() that breaks the graph mid-forward.
    ("moe_lora", "single", 1, set()),
    # flex_attention with a block mask and a score modifier: subgraphs of a higher-order op
    # (evaluated under no_grad on the CPU, where torch has no backward for it).
    ("flex_attention", "single", 1, set()),
    # The backward under compiled autograd, compiled by torch's own backend in the process:
    # only the forward's graph is kiln's.
    ("compiled_autograd", "single", 1, set()),
    # A compiled optimizer step with a tensor learning rate that a LambdaLR schedule changes each
    # step, and a Python float into the compiled loss that recompiles it once.
    ("scheduled_lr", "single", 1, set()),
    # An operator the job registers itself (torch.library.custom_op): a claim compiles it here
    # and shares it, as any graph.
    ("custom_op", "single", 1, set()),
]
#: (shape, layout, ranks, named fallbacks, torch.compile's mode): the compiled model again in a
#: mode that changes Inductor's settings the most (``max_autotune``, which on the CPU autotunes
#: its GEMM templates): kilnd's worker must compile with the process's settings, or its key and
#: its code would be another graph's. (``reduce-overhead`` differs from the default on a GPU only.)
MODE_CASES = [("model_compile", "single", 1, set(), "max-autotune-no-cudagraphs")]
ALL_CASES = [(*c, "") for c in CASES] + MODE_CASES
#: Shapes under bf16 autocast.
AUTOCAST = {"loss_compile"}


@pytest.fixture(scope="module")
def corpus_kilnd(tmp_path_factory: pytest.TempPathFactory) -> Any:
    k = Kilnd(tmp_path_factory.mktemp("corpus-kilnd"))
    yield k
    k.stop()


@pytest.mark.parametrize(
    ("shape", "layout", "ranks", "named", "mode"), ALL_CASES, ids=["-".join(filter(None, (c[0], c[1], c[4]))) for c in ALL_CASES]
)
def test_a_job_shape_goes_through_kilnd(
    corpus_kilnd: Kilnd, tmp_path: Path, shape: str, layout: str, ranks: int, named: set[str], mode: str
) -> None:
    job = "-".join(filter(None, ("corpus", shape, layout, mode)))
    env = {**runner.kiln_env(corpus_kilnd.uri), "KILN_TORCH_SNAPSHOT": "0", "KILN_TORCH_JOB": job}
    if mode:
        env["MODE"] = mode
    # A 2-core machine under CI's other tests can take minutes over a compile: the wait bound is
    # tested by itself (test_torch_graphs.py); here a waiter waits as long as the compile takes.
    env["KILN_TORCH_GRAPH_WAIT_SECS"] = "1800"
    kiln_ranks = runner.run(shape, layout, ranks, tmp_path / "kiln", env)
    eager = runner.run(shape, layout, ranks, tmp_path / "eager", {"COMPILE": "0"})
    compiled_by: dict[str, int] = {}
    for rank, r in enumerate(kiln_ranks):
        stats = r["graphs"]
        where = f"rank {rank} of {shape} ({layout}): {stats}\n{r['stderr'][-3000:]}"
        assert stats["graphs"], where
        # Dynamo's trace of each frame was timed: what a wait reads before any compile shows
        # this process's rate.
        assert stats["traced"] and all(s > 0 and n >= 1 for s, n in stats["traced"].values()), where
        # unshared: a graph whose compile left torch nothing to share (the resume function after
        # a graph break that generates no code), compiled here as torch would.
        assert set(stats["fallbacks"]) <= named | {"unshared"}, where
        assert "late" not in stats["fallbacks"], where
        for g in stats["graphs"]:
            # Through kilnd, or a named fallback compiled here; never left eager or pending.
            assert g["how"] in ("kilnd", "in-process"), where
            assert g["how"] == "kilnd" or set(stats["fallbacks"]), where
            # What the process paid is charged, and its calls counted as compiled steps.
            assert g["compile_s"] > 0 and g["calls"]["compiled"] > 0, where
            if g["how"] == "kilnd" and g["tier"] == "compiled":
                compiled_by[g["key"]] = compiled_by.get(g["key"], 0) + 1
            # Another mode's graph is a graph of its own: nothing on this kilnd had compiled it,
            # though the default mode's case of the same shape may have run on it before.
            assert not mode or (g["how"] == "kilnd" and g["tier"] == "compiled"), where
        # Every process reports at exit, whatever happened.
        assert "kiln: torch.compile cost this job" in r["stderr"], where
    # No graph was claimed twice: one rank compiled it through kilnd, or an earlier job of this
    # kilnd had (the compiled model's graph is also the optimizer job's).
    assert all(n == 1 for n in compiled_by.values()), compiled_by
    # And the ranks asked for one graph by one key: a key that held anything of one process's
    # own (an id()) split a graph between ranks, which the count above cannot see.
    keys_by_name: dict[str, set[str]] = {}
    for r in kiln_ranks:
        for g in r["graphs"]["graphs"]:
            if g["key"]:
                keys_by_name.setdefault(g["name"], set()).add(g["key"])
    assert all(len(keys) == 1 for keys in keys_by_name.values()), keys_by_name
    # The job's ledger agrees with the job's own clock: every process counted, and no more
    # compile charged than its processes ran, from their start to their last step's end (a
    # fallback compile counted as an eager step once made a run read 200x faster than it was).
    with kiln.Client(corpus_kilnd.uri) as c:
        (ret,) = c.torch_jobs(job).jobs
    ran = [r["first"] + sum(r["times"][1:]) for r in kiln_ranks]
    assert ret.processes == ranks and ret.ended, ret
    assert 0 < ret.compile_s <= sum(ran), (ret.compile_s, ran)
    # Every process's steps counted (a graph that runs twice a step, as one compile of two equal
    # blocks does, counts twice: the ledger counts a process's busiest graph's calls).
    assert ret.steps >= sum(len(r["losses"]) for r in kiln_ranks) or shape in ("decode", "dynamic"), (ret.steps, ret)
    tolerance = 2e-2 if shape in AUTOCAST else 1e-4
    for r, e in zip(kiln_ranks, eager, strict=True):
        assert len(r["losses"]) == len(e["losses"])
        for got, want in zip(r["losses"], e["losses"], strict=True):
            assert math.isclose(got, want, rel_tol=tolerance), (shape, layout, r["losses"], e["losses"])


#: The shapes with a graph that cannot travel to kilnd, and the sizes that make it so: the
#: compiled optimizer step of a model wide enough that its optimizer's state is past the 64 MiB
#: a payload carries as constants (about 100 MiB at width 512), the dynamic recompiles of a
#: changing sequence length and of the KV-cache decode loop.
CANNOT_TRAVEL = {"optimizer_compile": {"WIDTH": "512"}, "dynamic": {}, "decode": {}}


@pytest.mark.parametrize("shape", list(CANNOT_TRAVEL))
def test_async_runs_a_graph_that_cannot_travel_eagerly(corpus_kilnd: Kilnd, tmp_path: Path, shape: str) -> None:
    # Async, such a graph runs eagerly for the rest of the process: compiled at its first call it
    # stalled that step for the whole compile (6-11 s on an H100). Counted, not timed: no graph of
    # the job compiled in the process, so no step waited for a compile.
    sizes = CANNOT_TRAVEL[shape]
    env = {**runner.kiln_env(corpus_kilnd.uri), "KILN_TORCH_SNAPSHOT": "0", "KILN_TORCH_ASYNC": "1", "KILN_TORCH_JOB": f"corpus-{shape}-async"}
    (r,) = runner.run(shape, "single", 1, tmp_path / "async", {**env, **sizes})
    (eager,) = runner.run(shape, "single", 1, tmp_path / "eager", {"COMPILE": "0", **sizes})
    stats = r["graphs"]
    where = f"{shape} async: {stats}\n{r['stderr'][-3000:]}"
    assert stats["fallbacks"].get("unserializable", 0) >= 1 and set(stats["fallbacks"]) <= {"unserializable", "unshared"}, where
    # Eager, or kilnd's compile swapped in (or not yet): never compiled here.
    assert stats["graphs"] and all(g["how"] in ("eager", "kilnd") for g in stats["graphs"]), where
    assert "runs eagerly for the rest of this process" in r["stderr"], where
    assert "kiln: torch.compile cost this job" in r["stderr"], where
    assert len(r["losses"]) == len(eager["losses"]), where
    for got, want in zip(r["losses"], eager["losses"], strict=True):
        assert math.isclose(got, want, rel_tol=1e-4), (shape, r["losses"], eager["losses"])


@pytest.mark.parametrize("scope", ["step", "loop"])
def test_async_runs_a_backward_under_compiled_autograd_eagerly_while_its_forward_is(corpus_kilnd: Kilnd, tmp_path: Path, scope: str) -> None:
    # Compiled autograd compiles each backward in the process. Behind an async graph that runs
    # eagerly, the backward it captured was the eager forward's, a graph of every op: compiled, it
    # took a first step of 54 s against plain torch.compile's 32 s. While a graph runs eagerly the
    # backward now runs on autograd's own engine (compiled autograd entered around each backward,
    # "step"), or its captured graph runs uncompiled (entered once around the loop, before any
    # graph ran: compiled autograd captures each new autograd graph once). A width of its own
    # keeps the graph off this kilnd's tiers, so its compile (seconds, in a warm worker too)
    # outlasts the job's two steps: every backward ran beside an eager forward. Counted, not timed.
    sizes = {"WIDTH": "48", "STEPS": "2", "CA_SCOPE": scope}
    env = {**runner.kiln_env(corpus_kilnd.uri), "KILN_TORCH_SNAPSHOT": "0", "KILN_TORCH_ASYNC": "1", "KILN_TORCH_JOB": f"corpus-compiled-autograd-async-{scope}"}
    (r,) = runner.run("compiled_autograd", "single", 1, tmp_path / "async", {**env, **sizes})
    (eager,) = runner.run("compiled_autograd", "single", 1, tmp_path / "eager", {"COMPILE": "0", **sizes})
    stats = r["graphs"]
    where = f"compiled autograd async: {stats}\n{r['stderr'][-3000:]}"
    assert [g["how"] for g in stats["graphs"]] == ["eager"], where
    assert stats["eager_backwards"] == (len(r["losses"]) if scope == "step" else 1), where
    assert "a backward under compiled autograd runs eagerly" in r["stderr"], where
    # Inductor compiled nothing in the process (by torch's own timers): not the forward, which
    # kilnd compiles, nor a backward.
    assert "compile_fx_inner" not in r["timed"], (r["timed"], where)
    for got, want in zip(r["losses"], eager["losses"], strict=True):
        assert math.isclose(got, want, rel_tol=1e-4), (r["losses"], eager["losses"])


def test_async_names_a_graph_calling_an_operator_of_the_jobs_own(corpus_kilnd: Kilnd, tmp_path: Path) -> None:
    # kilnd's workers import torch alone, never a job's code, so they cannot read a graph that
    # calls an operator the job registered (torch.library.custom_op). Async, such a graph failed
    # in the worker and was asked again after 75 s and 300 s, silently eager meanwhile; the
    # worker now names the operator and the graph runs eagerly at once, under a fallback of its
    # own, with eager's losses.
    # kilnd's workers up first: the worker's answer then comes within the job's steps.
    corpus_kilnd.warm_torch_workers()
    env = {**runner.kiln_env(corpus_kilnd.uri), "KILN_TORCH_SNAPSHOT": "0", "KILN_TORCH_ASYNC": "1", "KILN_TORCH_JOB": "corpus-custom-op-async"}
    (r,) = runner.run("custom_op", "single", 1, tmp_path / "async", {**env, "STEPS": "1000"})
    (eager,) = runner.run("custom_op", "single", 1, tmp_path / "eager", {"COMPILE": "0", "STEPS": "1000"})
    stats = r["graphs"]
    where = f"custom op async: {stats}\n{r['stderr'][-3000:]}"
    assert stats["fallbacks"] == {"job_operator": 1}, where
    assert [g["how"] for g in stats["graphs"]] == ["eager"], where
    assert "corpus::scaled_gelu, an operator kilnd's torch does not have" in r["stderr"], where
    for got, want in zip(r["losses"], eager["losses"], strict=True):
        assert math.isclose(got, want, rel_tol=1e-4), (r["losses"], eager["losses"])
