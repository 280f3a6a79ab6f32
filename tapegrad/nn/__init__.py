"""Neural-network layers, PyTorch-shaped: the same names, arguments and parameter names, so a
PyTorch ``state_dict`` for the same architecture loads one to one.

>>> import tapegrad as tg
>>> net = tg.nn.Sequential(tg.nn.Linear(3, 4), tg.nn.ReLU(), tg.nn.Linear(4, 1))
>>> [name for name, _ in net.named_parameters()]
['0.weight', '0.bias', '2.weight', '2.bias']
"""

from .._tensor import Parameter
from . import functional, init, layers, utils
from ._module import Module
from ._state_dict import IncompatibleKeys
from .layers import *  # noqa: F403

__all__ = ["IncompatibleKeys", "Module", "Parameter", "functional", "init", "utils"]
__all__ += layers.__all__
