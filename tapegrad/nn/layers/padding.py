"""Padding layers: reflection, replication, zero, constant and circular, 1d/2d/3d (PyTorch's
names; ``padding`` is an int for every side or the (left, right, top, bottom, front, back)
widths), all through ``F.pad``."""

from __future__ import annotations

from typing import Any

from ..._tensor import Tensor
from .. import functional as F
from .._module import Module


class _PadNd(Module):
    padding: tuple[int, ...]
    mode: str = "constant"
    value: float = 0.0
    dims: int = 1

    def __init__(self, padding: Any) -> None:
        super().__init__()
        n = 2 * self.dims
        if isinstance(padding, (tuple, list)):
            if len(padding) != n:
                raise ValueError(
                    f"{type(self).__name__}: padding must be an int or {n} ints, got {padding!r}"
                )
            self.padding = tuple(int(p) for p in padding)
        else:
            self.padding = (int(padding),) * n

    def forward(self, input: Tensor) -> Tensor:
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        if self.mode == "constant" and type(self).__name__.startswith("Constant"):
            return f"padding={self.padding}, value={self.value}"
        return f"padding={self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = float(value)


class ReflectionPad1d(_PadNd):
    """Mirror the last axis without repeating the edge.

    >>> import tapegrad as tg
    >>> tg.nn.ReflectionPad1d(2)(tg.tensor([[[1.0, 2.0, 3.0]]])).tolist()
    [[[3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]]]
    """

    mode = "reflect"
    dims = 1


class ReflectionPad2d(ReflectionPad1d):
    """Mirror the last two axes: ``padding`` is (left, right, top, bottom) or one int.

    >>> import tapegrad as tg
    >>> tg.nn.ReflectionPad2d(1)(tg.arange(4.0).reshape(1, 1, 2, 2))[0, 0].tolist()
    [[3.0, 2.0, 3.0, 2.0], [1.0, 0.0, 1.0, 0.0], [3.0, 2.0, 3.0, 2.0], [1.0, 0.0, 1.0, 0.0]]
    """

    dims = 2


class ReflectionPad3d(ReflectionPad1d):
    """Mirror the last three axes.

    >>> import tapegrad as tg
    >>> tg.nn.ReflectionPad3d(1)(tg.zeros((1, 1, 2, 2, 2))).shape
    (1, 1, 4, 4, 4)
    """

    dims = 3


class ReplicationPad1d(_PadNd):
    """Repeat the edge value of the last axis.

    >>> import tapegrad as tg
    >>> tg.nn.ReplicationPad1d((1, 2))(tg.tensor([[[1.0, 2.0]]])).tolist()
    [[[1.0, 1.0, 2.0, 2.0, 2.0]]]
    """

    mode = "replicate"
    dims = 1


class ReplicationPad2d(ReplicationPad1d):
    """Repeat the edge values of the last two axes.

    >>> import tapegrad as tg
    >>> tg.nn.ReplicationPad2d(2)(tg.zeros((1, 1, 3, 3))).shape
    (1, 1, 7, 7)
    """

    dims = 2


class ReplicationPad3d(ReplicationPad1d):
    """Repeat the edge values of the last three axes.

    >>> import tapegrad as tg
    >>> tg.nn.ReplicationPad3d(1)(tg.zeros((1, 1, 1, 1, 1))).shape
    (1, 1, 3, 3, 3)
    """

    dims = 3


class CircularPad1d(_PadNd):
    """Wrap the last axis around.

    >>> import tapegrad as tg
    >>> tg.nn.CircularPad1d(1)(tg.tensor([[[1.0, 2.0, 3.0]]])).tolist()
    [[[3.0, 1.0, 2.0, 3.0, 1.0]]]
    """

    mode = "circular"
    dims = 1


class CircularPad2d(CircularPad1d):
    """Wrap the last two axes around.

    >>> import tapegrad as tg
    >>> tg.nn.CircularPad2d(1)(tg.zeros((1, 1, 2, 2))).shape
    (1, 1, 4, 4)
    """

    dims = 2


class CircularPad3d(CircularPad1d):
    """Wrap the last three axes around.

    >>> import tapegrad as tg
    >>> tg.nn.CircularPad3d(1)(tg.zeros((1, 1, 2, 2, 2))).shape
    (1, 1, 4, 4, 4)
    """

    dims = 3


class ConstantPad1d(_ConstantPadNd):
    """Pad the last axis with ``value``.

    >>> import tapegrad as tg
    >>> tg.nn.ConstantPad1d(1, 9.0)(tg.tensor([[1.0]])).tolist()
    [[9.0, 1.0, 9.0]]
    """

    dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two axes with ``value``.

    >>> import tapegrad as tg
    >>> tg.nn.ConstantPad2d((1, 0, 0, 1), 2.0)(tg.zeros((1, 1, 1))).tolist()
    [[[2.0, 0.0], [2.0, 2.0]]]
    """

    dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three axes with ``value``.

    >>> import tapegrad as tg
    >>> tg.nn.ConstantPad3d(1, 0.5)(tg.zeros((1, 1, 1, 1))).shape
    (1, 3, 3, 3)
    """

    dims = 3


class ZeroPad1d(ConstantPad1d):
    """Pad the last axis with zeros.

    >>> import tapegrad as tg
    >>> tg.nn.ZeroPad1d((0, 2))(tg.tensor([[1.0]])).tolist()
    [[1.0, 0.0, 0.0]]
    """

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)


class ZeroPad2d(ConstantPad2d):
    """Pad the last two axes with zeros.

    >>> import tapegrad as tg
    >>> tg.nn.ZeroPad2d(1)(tg.ones((1, 1, 1))).tolist()
    [[[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]
    """

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)


class ZeroPad3d(ConstantPad3d):
    """Pad the last three axes with zeros.

    >>> import tapegrad as tg
    >>> tg.nn.ZeroPad3d(1)(tg.zeros((1, 1, 1, 1))).shape
    (1, 3, 3, 3)
    """

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)
