"""``autograd.tracer.isbox``: a tapegrad Tensor plays the box."""

from typing import Any

import tapegrad as _tg


def isbox(x: Any) -> bool:
    """A box is a value a recording tape still follows."""
    return isinstance(x, _tg.Tensor) and any(tp.recording for tp in x._tapes)
