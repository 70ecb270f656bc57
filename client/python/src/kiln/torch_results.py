"""Moved to :mod:`kiln.torch.results`; this name re-exports its public API for existing imports
(from the leaf that defines it, :mod:`kiln._torch_results`)."""

from ._torch_results import TorchGraphAnswer, TorchGraphCost, TorchGraphStats, TorchJobReturn, TorchJobs

__all__ = ["TorchGraphAnswer", "TorchGraphCost", "TorchGraphStats", "TorchJobReturn", "TorchJobs"]
