"""An exponential moving average of a model's weights (dfdx's ModelEMA, Polyak averaging)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .. import _backend as B
from .._backend import np
from .._tensor import Tensor, _wrap


class ModelEMA:
    r"""Keeps ``ema = decay * ema + (1 - decay) * param`` for every parameter of ``model``.

    Buffers (running statistics, counters) are copied, not averaged. ``decay`` is a number or
    a function of the number of updates so far (e.g. ``lambda n: min(0.999, (1 + n) / (10 + n))``
    to average less while the model changes fast). Call ``update()`` after each
    ``optimizer.step``; evaluate with the averaged weights through ``copy_to(model)`` or,
    temporarily, ``with ema.swapped():``.

    >>> import tapegrad as tg
    >>> class M(tg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tg.Parameter(tg.zeros(2))
    >>> model = M()
    >>> ema = tg.optim.ModelEMA(model, decay=0.5)
    >>> _ = model.w.copy_(tg.ones(2)); ema.update()
    >>> ema.averaged_state_dict()["w"].tolist()
    [0.5, 0.5]
    """

    def __init__(self, model: Any, decay: float | Callable[[int], float] = 0.999) -> None:
        if not callable(decay) and not 0.0 <= decay <= 1.0:
            raise ValueError(f"ModelEMA: decay must be in [0, 1], got {decay}")
        self.model = model
        self.decay = decay
        self.num_updates = 0
        self._params = {name for name, _ in model.named_parameters()}
        # the averages, as arrays on the model's device, one per state_dict entry
        self.shadow: dict[str, Any] = {k: t._data.copy() for k, t in model.state_dict().items()}
        self._tmp: Any = None

    def _decay(self) -> float:
        d = self.decay(self.num_updates) if callable(self.decay) else self.decay
        if not 0.0 <= d <= 1.0:
            raise ValueError(f"ModelEMA: decay({self.num_updates}) = {d} is outside [0, 1]")
        return float(d)

    def update(self) -> None:
        """Fold the model's current weights into the average (buffers are copied)."""
        d = self._decay()
        for name, t in self.model.state_dict().items():
            s = self.shadow.get(name)
            if s is None or s.shape != t._data.shape:
                raise KeyError(
                    f"ModelEMA.update: the model's '{name}' has no average of its shape; was the "
                    "model changed after the ModelEMA was made?"
                )
            if name in self._params and s.dtype.kind == "f":
                s *= d
                s += np.multiply(t._data, 1.0 - d, out=self._scratch(s))
            else:
                B.xp_of(s).copyto(s, t._data)
        self.num_updates += 1

    def _scratch(self, like: Any) -> Any:
        if self._tmp is None or self._tmp.size < like.size or self._tmp.dtype != like.dtype:
            self._tmp = B.xp_of(like).empty(like.size, dtype=like.dtype)
        return self._tmp[: like.size].reshape(like.shape)

    def averaged_state_dict(self) -> dict[str, Tensor]:
        """The averaged weights as a model state dict (copies): ``model.load_state_dict(...)``."""
        return {k: _wrap(v.copy()) for k, v in self.shadow.items()}

    def copy_to(self, model: Any = None) -> None:
        """Write the averaged weights into ``model`` (by default the tracked one)."""
        (model if model is not None else self.model).load_state_dict(self.shadow)

    @contextlib.contextmanager
    def swapped(self, model: Any = None) -> Iterator[Any]:
        """Within the block ``model`` holds the averaged weights; its own come back after."""
        m = model if model is not None else self.model
        saved = {k: t._data.copy() for k, t in m.state_dict().items()}
        m.load_state_dict(self.shadow)
        try:
            yield m
        finally:
            m.load_state_dict(saved)

    def state_dict(self) -> dict[str, Any]:
        """``{"num_updates": n, "shadow": {name: numpy array}}`` (plus ``decay`` when a number)."""
        out: dict[str, Any] = {
            "num_updates": self.num_updates,
            "shadow": {k: B.to_device(v, "cpu").copy() for k, v in self.shadow.items()},
        }
        if not callable(self.decay):
            out["decay"] = self.decay
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from ``state_dict()``."""
        shadow = state_dict["shadow"]
        missing = [k for k in self.shadow if k not in shadow]
        if missing:
            raise KeyError(f"ModelEMA.load_state_dict: no average for {missing}")
        for k, s in self.shadow.items():
            v = shadow[k]
            a = v._data if isinstance(v, Tensor) else v
            a = B.to_device(np.asarray(B.to_device(a, "cpu")), B.device_of(s))
            if a.shape != s.shape:
                raise ValueError(
                    f"ModelEMA.load_state_dict: '{k}' has shape {a.shape}, the model's is {s.shape}"
                )
            self.shadow[k] = a.astype(s.dtype, copy=True)
        self.num_updates = int(state_dict.get("num_updates", 0))
        if "decay" in state_dict and not callable(self.decay):
            self.decay = float(state_dict["decay"])


EMA = ModelEMA
