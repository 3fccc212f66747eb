"""groupsgd: grouped data-parallel SGD. This package is the worker side for Python.

groupsgd.torch trains a PyTorch nn.Module as a groupsgd worker (docs/pytorch.md).
groupsgd._core is the C++ worker client library (registration, heartbeats, pushes and
pulls, directives, recovery) bound with pybind11; it shares numpy buffers with Python.
"""

from ._core import Session, set_log_level, worker_usage  # noqa: F401

__all__ = ["Session", "set_log_level", "worker_usage"]
