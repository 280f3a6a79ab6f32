"""``autograd.tracer.isbox``: a tapegrad Tensor plays the box."""

from typing import Any

import tapegrad as _tg


def isbox(x: Any) -> bool:
    return isinstance(x, _tg.Tensor)
