"""Module: parameters, buffers and submodules found by walking attributes.

A Module's fields are found by walking its attributes (and lists, tuples and dicts of them), in
the order they were set, and named by dotted path (``encoder.layers.0.weight``), as PyTorch
names them, so a PyTorch ``state_dict`` for the same architecture loads one to one. A
``Parameter`` trains; a plain Tensor attribute is a buffer (saved in ``state_dict``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .. import _tape
from .._backend import np
from .._tensor import Parameter, Tensor, _wrap


class Module:
    """Base class of layers and models: subclass it, set fields in ``__init__``, define ``forward``.

    >>> import tapegrad as tg
    >>> class Affine(tg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tg.Parameter(tg.ones(2))
    ...         self.b = tg.Parameter(tg.zeros(2))
    ...     def forward(self, x):
    ...         return x * self.w + self.b
    >>> [name for name, _ in Affine().named_parameters()]
    ['w', 'b']
    """

    training: bool = True
    _non_persistent: frozenset[str] = frozenset()

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if isinstance(value, Parameter) and value.name is None:
            value.name = name

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        path = getattr(self, "_path", None) or type(self).__name__
        _tape._SCOPE.append(path)
        try:
            return self.forward(*args, **kwargs)
        finally:
            _tape._SCOPE.pop()

    # -- walking ------------------------------------------------------------------------------
    def _fields(self) -> Iterator[tuple[str, Any]]:
        for k, v in vars(self).items():
            if k.startswith("_") or k == "training":
                continue
            yield k, v

    def _walk(self, prefix: str = "", seen: set[int] | None = None) -> Iterator[tuple[str, Any]]:
        """(dotted name, leaf) for every Tensor and Module below, depth first, in set order."""
        if seen is None:
            seen = set()
        for k, v in self._fields():
            yield from _walk_value(prefix + k, v, seen)

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, v in self._walk_modules(prefix):
            yield name, v

    def _walk_modules(self, prefix: str) -> Iterator[tuple[str, Module]]:
        for name, v in self._walk(prefix + "." if prefix else ""):
            if isinstance(v, Module):
                if len(name) > len(getattr(v, "_path", "") or ""):
                    object.__setattr__(v, "_path", name)
                yield name, v

    def children(self) -> Iterator[Module]:
        for _, v in self.named_children():
            yield v

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, v in self._walk_modules(""):
            if "." not in name or _is_container_child(name, self):
                yield name, v

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for name, v in self._walk(prefix + "." if prefix else "", set()):
            if isinstance(v, Parameter) and id(v) not in seen:
                seen.add(id(v))
                if v.name is None or len(name) > len(v.name):
                    v.name = name  # the path from the outermost module walked so far
                yield name, v

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        for name, v in self._walk(prefix + "." if prefix else "", set()):
            if isinstance(v, Tensor) and not isinstance(v, Parameter):
                yield name, v

    def buffers(self) -> Iterator[Tensor]:
        for _, b in self.named_buffers():
            yield b

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Dotted names to tensors: parameters and (persistent) buffers, as PyTorch orders them."""
        out: dict[str, Tensor] = {}
        for name, v in self._walk("", set()):
            if isinstance(v, Tensor) and name not in out and name.rsplit(".", 1)[-1] not in _owner_nonpersistent(self, name):
                out[name] = v
        return out

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> tuple[list[str], list[str]]:
        """Copy values in by name (tensors or numpy arrays). Returns (missing, unexpected)."""
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: {type(self).__name__}: missing keys {missing}, unexpected keys "
                f"{unexpected}; pass strict=False to load the keys that match"
            )
        for k, t in own.items():
            if k not in state:
                continue
            v = state[k]
            a = v._data if isinstance(v, Tensor) else np.asarray(v)
            if tuple(a.shape) != t.shape:
                raise ValueError(
                    f"load_state_dict: '{k}' has shape {tuple(a.shape)} in the state dict but "
                    f"{t.shape} in the model"
                )
            t._data = np.array(a, dtype=t.dtype, copy=True) if t.device == "cpu" else a.astype(t.dtype)
            t._version += 1
        return missing, unexpected

    # -- modes ----------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, flag: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; a frozen parameter is not auto-watched."""
        for p in self.parameters():
            p.requires_grad = flag
        return self

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        for m in list(self.modules())[::-1]:
            fn(m)
        return self

    def to(self, *args: Any, dtype: Any = None, device: Any = None) -> Module:
        """Convert parameters and float buffers in place (dtype and/or device)."""
        for name, t in list(self.state_dict().items()):
            new = t.to(*args, dtype=dtype if t.dtype.kind == "f" else None, device=device)
            if new is not t:
                t._data = new._data
                t._version += 1
        return self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self.named_children():
            r = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {r}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n" + "\n".join(lines) + "\n)"


def _walk_value(name: str, v: Any, seen: set[int]) -> Iterator[tuple[str, Any]]:
    if isinstance(v, Tensor):
        yield name, v
    elif isinstance(v, Module):
        if id(v) in seen:
            return
        seen.add(id(v))
        yield name, v
        yield from v._walk(name + ".", seen)
    elif isinstance(v, (list, tuple)):
        for i, item in enumerate(v):
            yield from _walk_value(f"{name}.{i}", item, seen)
    elif isinstance(v, dict):
        for k, item in v.items():
            yield from _walk_value(f"{name}.{k}", item, seen)


def _is_container_child(name: str, root: Module) -> bool:
    # "layers.0" is a child when "layers" is a list/tuple/dict attribute of root
    head, _, rest = name.partition(".")
    return "." not in rest and isinstance(getattr(root, head, None), (list, tuple, dict))


def _owner_nonpersistent(root: Module, name: str) -> frozenset[str]:
    parts = name.split(".")[:-1]
    m: Any = root
    for p in parts:
        m = m[int(p)] if isinstance(m, (list, tuple)) else (m[p] if isinstance(m, dict) else getattr(m, p, None))
        if m is None:
            return frozenset()
    return getattr(m, "_non_persistent", frozenset()) if isinstance(m, Module) else frozenset()


def detach_state(state: dict[str, Tensor]) -> dict[str, Any]:
    return {k: _wrap(v._data.copy()) for k, v in state.items()}
