"""The optimizer base: parameter groups, per-parameter state, ``step(grads)`` and state dicts.

A subclass supplies the per-parameter rule (as MLX's ``init_single`` / ``apply_single``); this
base does the bookkeeping (as PyTorch's ``optim/optimizer.py``): groups with their own
hyperparameters, state keyed by parameter, the missing-gradient check, and state dicts in
PyTorch's layout (state keyed by parameter index, ``param_groups`` with ``params`` index lists).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from .. import _backend as B
from .._autodiff import Gradients
from .._backend import np
from .._tensor import TAPE_LOOP as _LOOP
from .._tensor import Tensor

_NO_GRAD_CAUSES = (
    "it got no gradient: the Gradients passed to step() has no entry for it. Likely causes: it "
    "was not used in the forward pass; the gradient was asked for other sources "
    "(tape.gradient(loss, other_module)); the loss was computed outside a tape or under "
    "tg.no_grad(); or its branch was cut by detach()/stop_gradient()"
)


_ON_UPDATE: list[Any] = [None]  # the function ``on_update`` installed, or None


@contextlib.contextmanager
def on_update(fn: Callable[[Optimizer, Tensor, Any, dict[str, Any]], None]) -> Iterator[None]:
    """Within the block, every optimizer's ``update_one`` first calls
    ``fn(optimizer, parameter, gradient array, group)`` (``tg.compile`` captures updates so).
    One at a time: a second ``on_update`` inside the first raises.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([1.0]))
    >>> opt, seen = tg.optim.SGD([w], lr=0.5), []
    >>> with on_update(lambda o, p, g, group: seen.append(p is w)):
    ...     opt.update_one(w, tg.tensor([1.0]).numpy(), opt.param_groups[0])
    >>> seen, w.item()
    ([True], 0.5)
    """
    if _ON_UPDATE[0] is not None:
        raise RuntimeError("on_update: a hook is already installed (captures do not nest)")
    _ON_UPDATE[0] = fn
    try:
        yield
    finally:
        _ON_UPDATE[0] = None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


class Optimizer:
    """Base class: bookkeeping for parameter groups and per-parameter state.

    Subclasses set ``defaults`` (hyperparameter names and default values), validate them in
    ``check_group`` and implement ``init_single(p, group) -> state`` and
    ``apply_single(p, g, state, group)``, which updates the array ``p`` in place from the
    gradient array ``g`` (never modified).

    ``params`` is an iterable of Parameters (``model.parameters()``, or a Module itself, or
    ``model.named_parameters()``) or of dicts, each a parameter group
    ``{"params": [...], "lr": ...}`` whose keys override the defaults.
    """

    defaults: dict[str, Any]
    # The state entries that are arrays shaped like the parameter (the rest are numbers).
    array_state: ClassVar[tuple[str, ...]] = ()
    # The state entries that are numbers other than the step count (NAdam's mu_product).
    scalar_state: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Any, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}
        # flat scratch buffers keyed by (dtype, device, slot), grown to the largest parameter,
        # so the in-place rules need no per-step temporaries
        self._scratch: dict[tuple[Any, ...], Any] = {}
        self._views: dict[tuple[Any, ...], Any] = {}  # (shape, dtype, slot, type) -> view
        name = type(self).__name__
        if isinstance(params, Tensor):
            raise TypeError(
                f"{name}: params must be an iterable of Parameters or of param-group dicts, got "
                "a single tensor; pass [p] or model.parameters()"
            )
        if hasattr(params, "parameters") and callable(params.parameters):
            params = params.parameters()  # a Module
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if isinstance(groups[0], tuple):  # model.named_parameters(), as torch accepts
            groups = [p for _, p in groups]
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    # -- groups ---------------------------------------------------------------------------------
    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (the rest from ``defaults``)."""
        name = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{name}: a parameter group must be a dict with a 'params' key")
        ps = group["params"]
        params = [ps] if isinstance(ps, Tensor) else list(ps)
        for k in group:
            if k not in self.defaults and k not in ("params", "initial_lr"):
                raise ValueError(
                    f"{name}: unknown hyperparameter {k!r} in a parameter group; "
                    f"{name} takes {sorted(self.defaults)}"
                )
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{name}: can only optimize Tensors/Parameters, got {type(p).__name__}"
                )
            if p.dtype.kind != "f":
                raise TypeError(
                    f"{name}: a parameter of dtype {p.dtype} cannot be optimized; use a float dtype"
                )
            if id(p) in seen:
                raise ValueError(
                    f"{name}: parameter {_pname(p)} appears in more than one group (or twice); "
                    "each parameter may belong to one group only"
                )
            seen.add(id(p))
        full = {**self.defaults, **group, "params": params}
        self.check_group(full)
        self.param_groups.append(full)

    def check_group(self, group: dict[str, Any]) -> None:
        """Validate a group's hyperparameters; raise ValueError naming the bad one."""
        self._check("lr", group["lr"], lo=0.0)

    def _check(
        self, key: str, v: Any, *, lo: float = 0.0, hi: float | None = None, hi_open: bool = False
    ) -> None:
        name = type(self).__name__
        if not _is_number(v):
            raise TypeError(f"{name}: {key} must be a number, got {v!r}")
        bad = v < lo or (hi is not None and (v >= hi if hi_open else v > hi)) or math.isnan(v)
        if bad:
            rng = (
                f"[{lo}, {hi})" if hi_open else (f"[{lo}, {hi}]" if hi is not None else f">= {lo}")
            )
            raise ValueError(f"{name}: invalid {key}={v!r}; it must be in {rng}")

    # -- the rule (subclasses) ------------------------------------------------------------------
    def init_single(self, p: Any, group: dict[str, Any]) -> dict[str, Any]:
        """The initial state for one parameter array ``p``."""
        return {}

    def apply_single(self, p: Any, g: Any, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Update the array ``p`` in place from its gradient ``g``."""
        raise NotImplementedError

    def weight_decay(self, p: Any, g: Any, group: dict[str, Any], tmp: Any = None) -> Any:
        """The group's weight decay, applied first by every rule; returns the gradient to use.

        Coupled (L2, PyTorch's default): ``g + weight_decay * p`` (in scratch slot 0 of
        ``tmp``, ``self.tmp`` unless given). Decoupled (``decoupled_weight_decay=True``, AdamW):
        ``p *= 1 - lr * weight_decay`` in place, and ``g`` unchanged.
        """
        wd = group.get("weight_decay", 0.0)
        if not wd:
            return g
        if group.get("decoupled_weight_decay", False):
            p *= 1.0 - group["lr"] * wd
            return g
        d = np.multiply(p, wd, out=(tmp or self.tmp)(p, 0))
        d += g
        return d

    def tmp(self, like: Any, slot: int = 0) -> Any:
        """A scratch array shaped like ``like`` (its contents are garbage), reused across calls."""
        key = (like.shape, like.dtype, slot, type(like))
        view = self._views.get(key)
        if view is None:
            flat_key = key[1:]
            buf = self._scratch.get(flat_key)
            if buf is None or buf.size < like.size:
                buf = self._scratch[flat_key] = B.xp_of(like).empty(like.size, dtype=like.dtype)
                self._views.clear()  # views of the old buffer would keep it alive
            view = self._views[key] = buf[: like.size].reshape(like.shape)
        return view

    # -- step -----------------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Raises: gradients are values here, not state on the parameters, so there is nothing
        to clear (PyTorch's ``optimizer.zero_grad()``); the error shows the loop to write."""
        raise RuntimeError(
            f"{type(self).__name__}.zero_grad(): tapegrad keeps no gradient on the parameters "
            "(no .grad to clear): each step computes fresh gradients and passes them. Write\n"
            + _LOOP
        )

    def step(self, grads: Any = None, allow_missing: bool = False) -> None:
        """Update every trainable parameter in place from ``grads`` (a ``tg.Gradients``).

        A trainable parameter without a gradient raises an error naming it and the reason the
        tape recorded, unless ``allow_missing=True`` (then it is skipped). Parameters with
        ``requires_grad=False`` are skipped.
        """
        if grads is None:
            raise TypeError(
                f"{type(self).__name__}.step(): needs the gradients; tapegrad keeps them out of "
                "the parameters (PyTorch's step() reads .grad). Write\n" + _LOOP
            )
        if not hasattr(grads, "get"):
            raise TypeError(
                f"{type(self).__name__}.step: expected the tg.Gradients from tape.gradient(...) "
                f"(or a dict parameter -> gradient), got {type(grads).__name__}. Write\n" + _LOOP
            )
        work = []
        missing = []
        # a Gradients read by identity without its get() frame per parameter
        d = grads._d if type(grads) is Gradients else None
        for group in self.param_groups:
            for p in group["params"]:
                if not getattr(p, "requires_grad", True):
                    continue
                if d is not None:
                    e = d.get(id(p))
                    g = None if e is None else e[1]
                else:
                    g = grads.get(p)
                if g is None:
                    if not allow_missing:
                        missing.append(p)
                    continue
                ga = g._data if isinstance(g, Tensor) else (g if B.is_array(g) else np.asarray(g))
                if ga.shape != p._data.shape:
                    raise ValueError(
                        f"{type(self).__name__}.step: the gradient for {_pname(p)} has shape "
                        f"{tuple(ga.shape)} but the parameter has shape {p.shape}"
                    )
                work.append((p, ga, group))
        if missing:
            self._raise_missing(missing, grads)
        if _ON_UPDATE[0] is not None:
            for p, ga, group in work:
                self.update_one(p, ga, group)
            return
        state, apply_single = self.state, self.apply_single
        for p, ga, group in work:  # update_one written out: one frame less per parameter
            st = state.get(p)
            if st is None:
                st = state[p] = self.init_single(p._data, group)
            apply_single(p._data, ga, st, group)
            p._version += 1

    def update_one(self, p: Tensor, g: Any, group: dict[str, Any]) -> None:
        """Update one parameter in place from its gradient array ``g`` (of ``p``'s shape), by
        the rule of ``group``: its state is made by ``init_single`` on first use, the rule is
        ``apply_single``, and ``p``'s version moves. ``step`` calls it for each parameter once
        the gradients are checked; ``tg.compile`` calls it with a compiled step's gradients.

        >>> import tapegrad as tg
        >>> w = tg.Parameter(tg.tensor([1.0]))
        >>> opt = tg.optim.SGD([w], lr=0.5)
        >>> opt.update_one(w, tg.tensor([1.0]).numpy(), opt.param_groups[0])
        >>> w.item()
        0.5
        """
        hook = _ON_UPDATE[0]
        if hook is not None:  # tg.compile's capture records the update
            hook(self, p, g, group)
        st = self.state.get(p)
        if st is None:
            st = self.state[p] = self.init_single(p._data, group)
        self.apply_single(p._data, g, st, group)
        p._version += 1

    def _raise_missing(self, missing: list[Tensor], grads: Any) -> None:
        lines = []
        for p in missing:
            lines.append(f"  - {_pname(p)}{_shape(p)}: {_why_missing(grads, p)}")
        raise RuntimeError(
            f"{type(self).__name__}.step: {len(missing)} trainable parameter(s) have no gradient:\n"
            + "\n".join(lines)
            + "\nFreeze them (p.requires_grad = False, or module.requires_grad_(False)) or call "
            "step(grads, allow_missing=True) to skip them."
        )

    # -- state dicts ----------------------------------------------------------------------------
    def _indexed(self) -> Iterator[tuple[int, Tensor]]:
        i = 0
        for group in self.param_groups:
            for p in group["params"]:
                yield i, p
                i += 1

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        PyTorch's layout, with numpy arrays (copies, so later steps do not change it).
        """
        index = {id(p): i for i, p in self._indexed()}
        groups = []
        for group in self.param_groups:
            d = {k: v for k, v in group.items() if k != "params"}
            d["params"] = [index[id(p)] for p in group["params"]]
            groups.append(d)
        state = {}
        for p, st in self.state.items():
            if id(p) in index:
                state[index[id(p)]] = {
                    k: (B.to_device(v, "cpu").copy() if B.is_array(v) else v) for k, v in st.items()
                }
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from ``state_dict()`` (keys may be strings, as after a JSON round trip).

        A PyTorch optimizer's state dict converted to numpy loads too (its step counts and its
        flags ``foreach``, ``fused``, ``capturable``, ``differentiable`` and a false
        ``maximize`` are accepted and dropped). Anything else that this optimizer does not own
        (another optimizer's hyperparameters or state, values of the wrong type) raises
        ``ValueError`` before anything changes.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict):
            raise ValueError(
                f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups', got "
                f"a {type(state_dict).__name__}"
            )
        groups = state_dict.get("param_groups")
        states = state_dict.get("state")
        if not isinstance(groups, list) or not isinstance(states, dict):
            raise ValueError(
                f"{name}.load_state_dict: expected a dict with 'state' (a dict) and "
                "'param_groups' (a list)"
            )
        extra = sorted(set(state_dict) - {"state", "param_groups"})
        if extra:
            raise ValueError(f"{name}.load_state_dict: unexpected top-level keys {extra}")
        if len(groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the state dict has {len(groups)} parameter groups, "
                f"this optimizer has {len(self.param_groups)}"
            )
        by_index: dict[int, tuple[Tensor, dict[str, Any]]] = {}
        new_groups = []
        for gi, (saved, own) in enumerate(zip(groups, self.param_groups, strict=True)):
            g = self._load_group(gi, saved, own)
            for i, p in zip(saved["params"], own["params"], strict=True):
                by_index[int(i)] = (p, g)  # checked by _load_group
            new_groups.append(g)
        new_state: dict[Tensor, dict[str, Any]] = {}
        for k, st in states.items():
            i = _index(k)
            if i is None or i not in by_index:
                raise ValueError(
                    f"{name}.load_state_dict: state for parameter index {k!r} matches no parameter"
                )
            p, g = by_index[i]
            new_state[p] = self._load_single(p, st, g)
        self.param_groups = new_groups
        self.state = new_state

    def _load_group(self, gi: int, saved: Any, own: dict[str, Any]) -> dict[str, Any]:
        """One saved parameter group checked against what this optimizer takes."""
        name = type(self).__name__
        where = f"{name}.load_state_dict: group {gi}"
        if not isinstance(saved, dict) or not isinstance(saved.get("params"), list):
            raise ValueError(f"{where} is not a dict with a 'params' list of indices")
        if not all(_index(i) is not None for i in saved["params"]):
            raise ValueError(f"{where}: 'params' must be parameter indices (ints)")
        if len(saved["params"]) != len(own["params"]):
            raise ValueError(
                f"{where} has {len(saved['params'])} parameters in the state dict but "
                f"{len(own['params'])} here"
            )
        g = dict(own)  # keys the saved group lacks (older or PyTorch state) keep their values
        for k, v in saved.items():
            if k == "params":
                continue
            if k in _TORCH_FLAGS:
                if v not in (None, False, True) or (k == "maximize" and v):
                    raise ValueError(
                        f"{where}: {k}={v!r} is not supported; tapegrad's {name} runs with {k} off"
                    )
                continue
            if k not in self.defaults and k != "initial_lr":
                raise ValueError(
                    f"{where} has hyperparameter {k!r}, which {name} does not take ({name} "
                    f"takes {sorted(self.defaults)}): is this another optimizer's state dict?"
                )
            g[k] = _typed(where, k, v, self.defaults.get(k, 0.0))
        g["params"] = own["params"]
        self.check_group(g)
        return g

    def _load_single(self, p: Tensor, st: Any, group: dict[str, Any]) -> dict[str, Any]:
        where = f"{type(self).__name__}.load_state_dict: state of {_pname(p)}"
        if not isinstance(st, dict):
            raise ValueError(f"{where} is a {type(st).__name__}, not a dict")
        out: dict[str, Any] = {}
        for k, val in st.items():
            v = val._data if isinstance(val, Tensor) else val
            if v is None:  # PyTorch's SGD keeps momentum_buffer=None without momentum
                continue
            if k in self.array_state:
                a = B.to_device(v, "cpu") if B.is_array(v) else _asarray(v)
                if a is None or a.dtype.kind not in "biuf":
                    raise ValueError(f"{where}: '{k}' is a {type(val).__name__}, not an array")
                if tuple(a.shape) != p.shape:
                    raise ValueError(
                        f"{type(self).__name__}.load_state_dict: state '{k}' of {_pname(p)} has "
                        f"shape {tuple(a.shape)}, the parameter has shape {p.shape}"
                    )
                out[k] = B.to_device(a, p.device).astype(p.dtype, copy=True)
            elif k == "step":
                a = _asarray(v)
                if a is None or a.shape != () or a.dtype.kind not in "iuf" or not 0 <= a < 2**62:
                    raise ValueError(f"{where}: 'step' must be a count >= 0, got {val!r}")
                out[k] = int(a.item())
            elif k in self.scalar_state:
                a = _asarray(v)
                if a is None or a.shape != () or a.dtype.kind not in "iuf":
                    raise ValueError(f"{where}: '{k}' must be a number, got {val!r}")
                out[k] = float(a.item())
            else:
                raise ValueError(
                    f"{where} has entry {k!r}, which {type(self).__name__} does not keep (it "
                    f"keeps 'step' and {list(self.array_state)}): is this another optimizer's "
                    "state dict?"
                )
        if out:
            need = set(self.init_single(p._data, group)) - set(out)
            if need:
                raise ValueError(f"{where} lacks {sorted(need)}")
        return out

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


# PyTorch's implementation switches, accepted in its state dicts and dropped
_TORCH_FLAGS = frozenset({"foreach", "fused", "capturable", "differentiable", "maximize"})


def _index(k: Any) -> int | None:
    """A parameter index from a state dict (an int, or a string of digits after JSON)."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        return int(k)
    if isinstance(k, str) and k.isdigit():
        return int(k)
    return None


def _asarray(v: Any) -> Any:
    try:
        return np.asarray(v)
    except (ValueError, TypeError):
        return None


def _typed(where: str, key: str, v: Any, default: Any) -> Any:
    """A saved hyperparameter, of its default's type (bool, number, tuple of numbers)."""
    if isinstance(default, bool):
        ok = isinstance(v, (bool, np.bool_))
        v = bool(v) if ok else v
    elif isinstance(default, tuple):
        ok = isinstance(v, (list, tuple)) and len(v) == len(default) and all(map(_is_number, v))
        v = tuple(v) if ok else v
    else:
        ok = _is_number(v)
    if not ok:
        raise ValueError(
            f"{where}: {key}={v!r} has the wrong type; {key} is a "
            f"{type(default).__name__} like {default!r}"
        )
    return v


def _why_missing(grads: Any, p: Tensor) -> str:
    """The reason the tape recorded for ``p``'s missing gradient, else the likely causes."""
    if isinstance(grads, Gradients):
        why = grads.why_missing(p)
        # a Gradients that knows nothing of a tape says only what an empty one says
        if why and why != Gradients().why_missing(p):
            return why
    return _NO_GRAD_CAUSES


def _shape(p: Tensor) -> str:
    return f" (shape {p.shape})" if getattr(p, "name", None) else ""


def _pname(p: Tensor) -> str:
    n = getattr(p, "name", None)
    return f"'{n}'" if n else f"an unnamed parameter (shape {p.shape})"
