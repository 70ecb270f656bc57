"""Moved to :mod:`kiln.torch.results`; this name re-exports its public API for existing imports."""

from .torch.results import TorchGraphAnswer, TorchGraphCost, TorchGraphStats, TorchJobReturn, TorchJobs

__all__ = ["TorchGraphAnswer", "TorchGraphCost", "TorchGraphStats", "TorchJobReturn", "TorchJobs"]
