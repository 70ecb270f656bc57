"""Typed results of kilnd's torch.compile graph calls (``kiln.v1.TorchGraphs``), apart from the
protobuf types, as :mod:`kiln.results` has them for the other services. They are defined in the
leaf :mod:`kiln._torch_results` (the client uses them without importing ``kiln.torch``)."""

from .._torch_results import TorchGraphAnswer, TorchGraphCost, TorchGraphStats, TorchJobReturn, TorchJobs

__all__ = ["TorchGraphAnswer", "TorchGraphCost", "TorchGraphStats", "TorchJobReturn", "TorchJobs"]
