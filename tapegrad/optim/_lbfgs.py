"""L-BFGS with a closure, PyTorch's algorithm (``torch.optim.LBFGS``) step for step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backend import np
from .._tensor import Tensor
from ._optimizer import Optimizer


class LBFGS(Optimizer):
    """Limited-memory BFGS. ``step(closure)`` calls ``closure()`` several times; it must
    return ``(loss, grads)``, the loss and the ``tg.Gradients`` of the current parameters::

        def closure():
            with tg.Tape() as tape:
                loss = loss_fn(model(x), y)
            return loss, tape.gradient(loss, model)

    Each step runs up to ``max_iter`` iterations: the direction ``d = -H g`` from the two-loop
    recursion over the last ``history_size`` pairs ``(s, y)`` (``H_0 = s.y / y.y``), a step
    ``t = lr`` (the first one ``min(1, 1 / |g|_1) * lr``), stopping when
    ``max |g| <= tolerance_grad``, when the change of the loss or of the parameters is below
    ``tolerance_change``, or after ``max_eval`` evaluations. One parameter group; no line search
    (``line_search_fn='strong_wolfe'`` is not offered).

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, -2.0], dtype=tg.float64))
    >>> opt = tg.optim.LBFGS([w])
    >>> def closure():
    ...     with tg.Tape() as tape:
    ...         loss = ((w - 1.0) ** 2).sum()
    ...     return loss, tape.gradient(loss)
    >>> _ = opt.step(closure)
    >>> [round(v, 6) for v in w.tolist()]
    [1.0, 1.0]
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ) -> None:
        if line_search_fn is not None:
            raise NotImplementedError(
                f"LBFGS: line_search_fn={line_search_fn!r} is not offered; use None (a fixed "
                "step lr, PyTorch's default)"
            )
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {
            "lr": lr, "max_iter": max_iter, "max_eval": max_eval,
            "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
            "history_size": history_size,
        }  # fmt: skip
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS: takes one parameter group (as PyTorch's)")
        self._params: list[Tensor] = self.param_groups[0]["params"]
        self._lbfgs: dict[str, Any] = {"func_evals": 0, "n_iter": 0}

    def check_group(self, group: dict[str, Any]) -> None:
        self._check("lr", group["lr"], lo=0.0)
        for k in ("max_iter", "max_eval", "history_size"):
            self._check(k, group[k], lo=1)

    def _flat_grad(self, grads: Any) -> Any:
        parts = []
        for p in self._params:
            g = grads.get(p)
            ga = np.zeros(p.shape, p.dtype) if g is None else np.asarray(getattr(g, "_data", g))
            parts.append(ga.reshape(-1))
        return np.concatenate(parts)

    def _add(self, t: float, d: Any) -> None:
        offset = 0
        for p in self._params:
            n = p._data.size
            p._data += (t * d[offset : offset + n]).reshape(p.shape).astype(p.dtype)
            p._version += 1
            offset += n

    def _evaluate(self, closure: Callable[[], Any]) -> tuple[Any, float, Any]:
        out = closure()
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                "LBFGS.step: the closure must return (loss, grads), e.g. "
                "`return loss, tape.gradient(loss, model)`"
            )
        loss, grads = out
        return loss, float(loss), self._flat_grad(grads)

    def step(self, closure: Any, allow_missing: bool = False) -> Any:  # type: ignore[override]
        """Run up to ``max_iter`` L-BFGS iterations; return the first loss ``closure`` gave."""
        if not callable(closure):
            raise TypeError("LBFGS.step: needs a closure returning (loss, grads)")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]
        state = self._lbfgs

        orig_loss, loss, flat_grad = self._evaluate(closure)
        current_evals = 1
        state["func_evals"] += 1
        if np.abs(flat_grad).max() <= tol_grad:
            return orig_loss

        d: Any = state.get("d")
        t: Any = state.get("t")
        old_dirs: Any = state.get("old_dirs")
        old_stps: Any = state.get("old_stps")
        ro: Any = state.get("ro")
        h_diag: Any = state.get("H_diag")
        prev_flat_grad: Any = state.get("prev_flat_grad")
        prev_loss: Any = state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1.0
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = float(y @ s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(y @ y)
                al = [0.0] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):  # the two-loop recursion
                    al[i] = float(old_stps[i] @ q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                r = q * h_diag
                for i in range(len(old_dirs)):
                    be_i = float(old_dirs[i] @ r) * ro[i]
                    r = r + (al[i] - be_i) * old_stps[i]
                d = r
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            t = min(1.0, 1.0 / float(np.abs(flat_grad).sum())) * lr if state["n_iter"] == 1 else lr
            if float(flat_grad @ d) > -tol_change:  # not a descent direction
                break
            ls_evals = 0
            self._add(t, d)
            opt_cond = False
            if n_iter != max_iter:
                _, loss, flat_grad = self._evaluate(closure)
                opt_cond = bool(np.abs(flat_grad).max() <= tol_grad)
                ls_evals = 1
            current_evals += ls_evals
            state["func_evals"] += ls_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break

        state.update(
            d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
            prev_flat_grad=prev_flat_grad, prev_loss=prev_loss,
        )  # fmt: skip
        return orig_loss

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError("LBFGS: state_dict is not offered (its history is not saved)")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise NotImplementedError("LBFGS: load_state_dict is not offered")
