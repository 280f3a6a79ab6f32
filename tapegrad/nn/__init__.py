"""Neural-network layers, PyTorch-shaped: the same names, arguments and parameter names."""

from .._tensor import Parameter
from . import functional, init
from ._module import Module

__all__ = ["Module", "Parameter", "functional", "init"]
