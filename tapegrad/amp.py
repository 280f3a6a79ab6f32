"""Mixed precision: ``autocast`` (from ``tapegrad._amp``) and a gradient scaler for float16.

A float16 training step, with PyTorch's ``GradScaler`` steps adapted to the tape::

    scaler = tg.amp.GradScaler()
    with tg.Tape() as tape, tg.autocast(tg.float16):
        loss = loss_fn(model(x), y)
        scaled = scaler.scale(loss)  # on the tape: inside it
    grads = tape.gradient(scaled, model)
    scaler.step(opt, grads)        # unscales; skips the step when a gradient is inf or nan
    scaler.update()                # grows or backs off the scale
"""

from __future__ import annotations

from typing import Any

from ._amp import autocast, get_autocast_dtype, is_autocast_enabled
from ._autodiff import Gradients
from ._backend import xp_of
from ._tensor import _wrap

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]


class GradScaler:
    """Scale the loss so that float16 gradients do not underflow; unscale before the step.

    ``scale(loss)`` multiplies by the current scale ``S``. ``step(opt, grads)`` divides the
    gradients by ``S`` (``unscale_``) and calls ``opt.step(grads)`` unless a gradient is inf or
    nan, in which case the step is skipped. ``update()`` then sets ``S <- S * backoff_factor``
    after a skipped step, or ``S <- S * growth_factor`` after ``growth_interval`` steps in a
    row without one (PyTorch's rule). ``enabled=False`` makes every method a pass-through.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0, 2.0]))
    >>> opt = tg.optim.SGD([w], lr=0.1)
    >>> scaler = tg.amp.GradScaler(init_scale=1024.0)
    >>> with tg.Tape() as tape:
    ...     loss = scaler.scale((w * w).sum())
    >>> grads = tape.gradient(loss)
    >>> grads[w].tolist()
    [2048.0, 4096.0]
    >>> scaler.step(opt, grads); scaler.update()
    >>> w.tolist(), scaler.get_scale()
    ([0.800000011920929, 1.600000023841858], 1024.0)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) < 1:
            raise ValueError(f"GradScaler: growth_interval must be >= 1, got {growth_interval}")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._enabled = bool(enabled)
        self._found_inf: bool | None = None  # this iteration's verdict; None before any check
        self._unscaled: set[int] = set()  # ids of the Gradients unscaled this iteration

    def is_enabled(self) -> bool:
        """Whether scaling is on."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def scale(self, loss: Any) -> Any:
        """``loss * scale``: differentiate this instead of the loss (call it while the tape
        is open, so that the product is recorded)."""
        if not self._enabled:
            return loss
        if isinstance(loss, (list, tuple)):
            return type(loss)(self.scale(t) for t in loss)
        return loss * self._scale

    def unscale_(self, grads: Gradients) -> Gradients:
        """Divide ``grads`` by the scale in place (once per iteration) and check them for inf/nan.

        Call it before clipping: ``scaler.unscale_(grads); grads = grads.clip_by_global_norm(1)``.
        """
        if not self._enabled:
            return grads
        if not isinstance(grads, Gradients):
            raise TypeError(
                f"GradScaler.unscale_: expected the tg.Gradients from tape.gradient(...), got "
                f"{type(grads).__name__}"
            )
        if id(grads) in self._unscaled:
            raise RuntimeError(
                "GradScaler.unscale_: these gradients were already unscaled since the last "
                "update(); call unscale_ once per iteration"
            )
        inv = 1.0 / self._scale
        bad = False
        # In place, as torch's unscale_ on .grad: the mapping keeps its keys, each value is
        # replaced by its unscaled copy (the old arrays may be shared with the tape's caller).
        for k, (t, g) in list(grads._d.items()):
            a = g._data
            u = a * a.dtype.type(inv)
            bad = bad or not bool(xp_of(u).isfinite(u).all())
            grads._d[k] = (t, _wrap(u))
        self._unscaled.add(id(grads))
        self._found_inf = bool(self._found_inf) or bad
        return grads

    def step(self, optimizer: Any, grads: Gradients, **kwargs: Any) -> Any:
        """Unscale ``grads`` (unless ``unscale_`` did) and run ``optimizer.step(grads)``, or skip
        it when a gradient is inf or nan. Returns what the step returns, None when skipped."""
        if not self._enabled:
            return optimizer.step(grads, **kwargs)
        if id(grads) not in self._unscaled:
            self.unscale_(grads)
        if self._found_inf:
            return None
        return optimizer.step(grads, **kwargs)

    def update(self, new_scale: float | None = None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones; or set
        ``new_scale``. Call once per iteration, after ``step``."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        else:
            if self._found_inf is None:
                raise RuntimeError(
                    "GradScaler.update: no inf checks were recorded since the last update; "
                    "call scaler.step(optimizer, grads) (or scaler.unscale_(grads)) first"
                )
            if self._found_inf:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._found_inf = None
        self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict()`` (a PyTorch GradScaler's state dict loads too)."""
        if not self._enabled:
            return
        if not state:
            raise RuntimeError(
                "GradScaler.load_state_dict: the state dict is empty (it came from a disabled "
                "scaler)"
            )
        self._scale = float(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
