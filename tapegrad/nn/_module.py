"""Module: parameters, buffers and submodules found by walking attributes.

A Module's fields are found by walking its attributes (and lists, tuples and dicts of them) in
the order they were set, and named by dotted path (``encoder.layers.0.weight``) as PyTorch names
them, so a PyTorch ``state_dict`` for the same architecture loads one to one. A ``Parameter``
trains; any other Tensor attribute is a buffer (saved in ``state_dict`` unless registered with
``persistent=False``). Attributes whose names start with ``_`` are private and never walked,
unless set through ``register_buffer``/``register_parameter``/``add_module`` (PyTorch allows
such names). Each Parameter learns its dotted path (``Parameter.name``) and each Module its path
(used as the tape scope of the ops it runs) when it is set on a module.

Within one module the order is PyTorch's: its own parameters, then its own buffers, then its
submodules (and lists/dicts of them) depth first.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from .. import _autodiff
from .. import _backend as B
from .._autodiff import scope_list
from .._backend import np
from .._dtypes import as_dtype
from .._tensor import Parameter, Tensor, _wrap
from ._hooks import _ON_CALL, call_hook, structure, structure_changed
from ._state_dict import IncompatibleKeys, as_numbers, fresh_copy, keys_message

# the modules whose repr is being built (a cycle prints as "Name(...)")
_REPR_ACTIVE: set[int] = set()


class Module:
    """Base class of layers and models: subclass it, set fields in ``__init__``, define ``forward``.

    Fields are declared at class level with their types and set in ``__init__``; parameters
    are initialised in ``reset_parameters()``. Calling the module runs ``forward`` with the
    module's dotted path on the scope stack, so tape nodes say which layer made them.

    >>> import tapegrad as tg
    >>> class Affine(tg.nn.Module):
    ...     w: tg.Parameter
    ...     b: tg.Parameter
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tg.Parameter(tg.ones(2))
    ...         self.b = tg.Parameter(tg.zeros(2))
    ...     def forward(self, x):
    ...         return x * self.w + self.b
    >>> [name for name, _ in Affine().named_parameters()]
    ['w', 'b']
    >>> Affine()(tg.tensor([1.0, 2.0])).tolist()
    [1.0, 2.0]
    """

    training: bool = True
    # the dotted path from the outermost module that holds it (set on assignment), for scopes
    _path: str | None = None
    _non_persistent: frozenset[str] = frozenset()
    # names starting with "_" that register_* made public (PyTorch allows "_float_tensor")
    _registered: frozenset[str] = frozenset()

    def __init__(self) -> None:
        # Nothing to set up: the class-level defaults cover a subclass that skips this call.
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if (name[0] != "_" or name in self._registered) and name != "training":
            structure_changed()
            _adopt(name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        structure_changed()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it."""
        raise NotImplementedError(
            f"{type(self).__name__}.forward: subclasses of Module must define forward()"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # ``_called(self.forward, ...)`` written out: two frames per layer call, not four
        hook = _ON_CALL[0]
        if hook is not None:  # tg.compile's capture: the modules a step calls
            hook(self)
        scope = scope_list()  # this thread's module scope
        scope.append(self._path or type(self).__name__)
        try:
            return self.forward(*args, **kwargs)
        finally:
            scope.pop()

    def _called(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` as this module's call: seen by ``tg.compile``'s capture and
        recorded in this module's scope (a layer that fuses a child's work into one primitive
        calls the child so, and the child still counts as called)."""
        hook = call_hook()
        if hook is not None:  # tg.compile's capture: the modules a step calls
            hook(self)
        scope = _autodiff.scope_list()  # this thread's module scope
        scope.append(self._path or type(self).__name__)
        try:
            return fn(*args, **kwargs)
        finally:
            scope.pop()

    # -- registration (PyTorch's explicit forms) ------------------------------------------------
    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Set a buffer; ``persistent=False`` keeps it out of ``state_dict`` (a cached mask)."""
        if tensor is not None and (not isinstance(tensor, Tensor) or isinstance(tensor, Parameter)):
            raise TypeError(
                f"register_buffer: '{name}' must be a Tensor (not a Parameter) or None, "
                f"got {type(tensor).__name__}; use register_parameter for parameters"
            )
        self._register(name)
        setattr(self, name, tensor)
        if persistent:
            object.__setattr__(self, "_non_persistent", self._non_persistent - {name})
        else:
            object.__setattr__(self, "_non_persistent", self._non_persistent | {name})

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Set a parameter (or None, a declared but absent parameter such as a missing bias)."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter: '{name}' must be a Parameter or None, got "
                f"{type(param).__name__}; wrap it as tg.nn.Parameter(tensor)"
            )
        self._register(name)
        setattr(self, name, param)

    def add_module(self, name: str, module: Module | None) -> None:
        """Set a submodule by name (``register_module`` is an alias)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: '{name}' must be a Module, got {type(module).__name__}")
        self._register(name)
        setattr(self, name, module)

    register_module = add_module

    def _register(self, name: str) -> None:
        if not isinstance(name, str) or not name or "." in name or name == "training":
            raise KeyError(
                f"{type(self).__name__}: {name!r} cannot name a field: use a non-empty string "
                "without '.' (dots separate the levels of a dotted path)"
            )
        if name[0] == "_":
            object.__setattr__(self, "_registered", self._registered | {name})

    def get_submodule(self, target: str) -> Module:
        """The submodule at a dotted path (``"encoder.layers.0"``); ``""`` is the module itself."""
        for name, m in self.named_modules(remove_duplicate=False):
            if name == target:
                return m
        raise AttributeError(
            f"get_submodule: {type(self).__name__} has no submodule '{target}'; its submodules "
            f"are {[n for n, _ in self.named_modules() if n][:20]}"
        )

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at a dotted path (``"encoder.layers.0.weight"``)."""
        for name, p in self.named_parameters(remove_duplicate=False):
            if name == target:
                return p
        raise AttributeError(f"get_parameter: {type(self).__name__} has no parameter '{target}'")

    # -- walking: every listing below is a filter over one walk (``walk``) ---------------------
    def _fields(self) -> list[tuple[str, Any]]:
        """(name, value) of the public attributes, in the order set; containers override it."""
        reg = self._registered
        return [
            (k, v) for k, v in vars(self).items() if (k[0] != "_" or k in reg) and k != "training"
        ]

    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every one below it,
        depth first; a shared module once unless ``remove_duplicate=False`` (cycles never loop)."""
        seen = (memo if memo is not None else set()) if remove_duplicate else None
        for e in _Walk(dedupe=remove_duplicate, seen=seen).run(self, prefix):
            if isinstance(e.value, Module):
                yield e.path, e.value

    def _child_items(self) -> list[tuple[str, Module]]:
        """Direct submodules with their local names; a list attribute gives ``layers.0``, ..."""
        return [
            (e.local, e.value)
            for e in _Walk(dedupe=False, recurse=False).run(self)
            if isinstance(e.value, Module) and e.owner is self
        ]

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for the direct submodules (a shared one once)."""
        seen: set[int] = set()
        for name, m in self._child_items():
            if id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct submodules."""
        for _, m in self.named_children():
            yield m

    def modules(self) -> Iterator[Module]:
        """This module and every module below it, each once."""
        for _, m in self.named_modules():
            yield m

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` in PyTorch's order; a shared parameter once (first name).

        Walking from a module also tells each parameter its full path (``Parameter.name``).
        """
        for name, t in self._tensors(prefix, recurse, remove_duplicate, _is_parameter):
            if t.name is None or name.endswith("." + t.name):
                t.name = name  # the path from the outermost module walked so far
            yield name, t

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter, each once."""
        cached = self._cached_parameters() if recurse else None
        if cached is not None:
            return iter(cached)
        return (p for _, p in self.named_parameters(recurse=recurse))

    def _cached_parameters(self) -> list[Parameter] | None:
        """The parameter list ``_parameter_list`` kept, while no module's fields have changed
        since (None: walk again)."""
        cached = self.__dict__.get("_param_cache")
        return cached[1] if cached is not None and cached[0] == structure() else None

    def _parameter_list(self) -> list[Parameter]:
        """``list(self.parameters())`` (``tape.gradient(loss, model)`` takes it every step),
        cached until any module's fields change.

        Every public assignment or deletion on any Module, and every change to a container
        (Sequential, ModuleList, ModuleDict), moves a global structure counter; a tree that
        holds plain lists or dicts (which can change unseen) is walked every time.
        """
        cached = self._cached_parameters()
        if cached is not None:
            return list(cached)
        walk = _Walk(dedupe=True)
        out = [t for _, t in _unique_tensors(walk.run(self), _is_parameter)]
        if not walk.mutable:
            object.__setattr__(self, "_param_cache", (structure(), out))
        return list(out)

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, buffer)`` for every non-Parameter tensor (persistent or not)."""
        return self._tensors(prefix, recurse, remove_duplicate, _is_buffer)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer, each once."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def _tensors(
        self, prefix: str, recurse: bool, remove_duplicate: bool, keep: Callable[[Any], bool]
    ) -> Iterator[tuple[str, Any]]:
        """``(dotted name, tensor)`` for the tensors ``keep`` accepts, from the walk;
        without ``recurse`` only the module's own fields (not those in lists)."""
        entries = _Walk(dedupe=remove_duplicate, recurse=recurse).run(self, prefix)
        if not recurse:
            entries = (e for e in entries if e.owner is self and "." not in e.local)
        if remove_duplicate:
            return _unique_tensors(entries, keep)
        return ((e.path, e.value) for e in entries if keep(e.value))

    def num_parameters(self, trainable_only: bool = False) -> int:
        """The number of parameter elements (only those with ``requires_grad`` if asked)."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]:
        """Dotted names to tensors: parameters and persistent buffers, in PyTorch's order.

        A module or parameter reachable by two paths appears under both (as in PyTorch). The
        values share memory with the model; ``keep_vars=True`` gives the Parameter objects
        themselves rather than detached tensors.

        >>> import tapegrad as tg
        >>> list(tg.nn.BatchNorm1d(3).state_dict())
        ['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
        """
        out: dict[str, Tensor] = {}
        for e in _Walk(dedupe=False).run(self, prefix, base=prefix):
            if not isinstance(e.value, Tensor) or e.path in out:
                continue
            if e.owner is not None and e.local.split(".", 1)[0] in e.owner._non_persistent:
                continue
            out[e.path] = e.value if keep_vars else _wrap(e.value._data)
        return out

    def load_state_dict(self, state_dict: Any, strict: bool = True) -> IncompatibleKeys:
        """Copy values in by name (tensors, numpy arrays or anything ``np.asarray`` reads).

        Values are cast to the model's dtypes and copied (the model never shares memory with
        ``state_dict``). With ``strict=True`` any missing or unexpected key is an error;
        a shape mismatch is always one. Returns ``(missing_keys, unexpected_keys)``.

        >>> import numpy as np, tapegrad as tg
        >>> lin = tg.nn.Linear(2, 1)
        >>> lin.load_state_dict({"weight": np.ones((1, 2)), "bias": np.zeros(1)})
        IncompatibleKeys(missing_keys=[], unexpected_keys=[])
        >>> lin(tg.tensor([[1.0, 2.0]])).tolist()
        [[3.0]]
        """
        if not hasattr(state_dict, "keys"):
            raise TypeError(
                f"load_state_dict: expected a mapping of names to arrays, got "
                f"{type(state_dict).__name__}"
            )
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(keys_message(type(self).__name__, missing, unexpected))
        arrays: dict[str, Any] = {}
        bad = []
        for k, t in own.items():
            if k not in state_dict:
                continue
            a = as_numbers(type(self).__name__, k, state_dict[k])
            if tuple(a.shape) != t.shape:
                bad.append(f"'{k}': {tuple(a.shape)} in the state dict, {t.shape} in the model")
            arrays[k] = a
        if bad:
            raise RuntimeError(
                f"load_state_dict: {type(self).__name__}: shapes differ for "
                + "; ".join(bad)
                + ". The state dict comes from a different architecture or configuration"
            )
        for k, a in arrays.items():
            t = own[k]
            if B.device_of(a) == t.device:
                t._data = B.xp_of(a).array(a, dtype=t.dtype, copy=True)
            else:
                t._data = B.to_device(B.to_device(a, "cpu").astype(t.dtype), t.device)
            t._version += 1
        return IncompatibleKeys(missing, unexpected)

    # -- modes and conversions -------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active, batch norm uses batch statistics) for every module."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; a frozen parameter is not auto-watched."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every submodule, children before parents (PyTorch's order), each once.

        >>> import tapegrad as tg
        >>> net = tg.nn.Sequential(tg.nn.Linear(2, 2), tg.nn.Linear(2, 1))
        >>> def zero_bias(m):
        ...     if isinstance(m, tg.nn.Linear):
        ...         tg.nn.init.zeros_(m.bias)
        >>> net.apply(zero_bias)[1].bias.tolist()
        [0.0]
        """
        seen: set[int] = set()

        def visit(m: Module) -> None:
            seen.add(id(m))
            for _, c in m._child_items():
                if id(c) not in seen:
                    visit(c)
            fn(m)

        visit(self)
        return self

    def to(self, *args: Any, dtype: Any = None, device: Any = None) -> Module:
        """Convert parameters and float buffers in place: ``to(tg.float64)``, ``to("cuda")``.

        The same Parameter objects are kept (an optimizer built before still holds them).
        """
        for a in args:
            if isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda", "gpu"):
                device = a
            else:
                dtype = a
        d = as_dtype(dtype) if dtype is not None else None
        if d is not None and d.kind != "f":
            raise TypeError(f"Module.to: dtype must be a float dtype, got {d}")
        for _, t in _unique_tensors(_Walk(dedupe=True).run(self), _is_tensor):
            a = t._data
            if d is not None and a.dtype.kind == "f" and a.dtype != d:
                a = a.astype(d)
            if device is not None and B.device_of(a) != B.normalize_device(device):
                a = B.to_device(a, B.normalize_device(device))
            if a is not t._data:
                t._data = a
                t._version += 1
        return self

    def float(self) -> Module:
        """Parameters and float buffers to float32."""
        return self.to(np.float32)

    def double(self) -> Module:
        """Parameters and float buffers to float64."""
        return self.to(np.float64)

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        # A copied Parameter must be a new leaf: fresh tape identity, on no tape.
        for _, t in _unique_tensors(_Walk(dedupe=True).run(self), _is_tensor):
            if id(t) not in memo:
                memo[id(t)] = fresh_copy(t)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in vars(self).items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    # -- printing -----------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The arguments shown inside the module's repr; layers override it."""
        return ""

    def __repr__(self) -> str:
        if id(self) in _REPR_ACTIVE:  # a module that holds one of its ancestors
            return type(self).__name__ + "(...)"
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        _REPR_ACTIVE.add(id(self))
        try:
            child_lines = [f"({n}): " + _indent(repr(m), 2) for n, m in self._child_items()]
        finally:
            _REPR_ACTIVE.discard(id(self))
        lines = extra_lines + child_lines
        out = type(self).__name__ + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                out += extra_lines[0]
            else:
                out += "\n  " + "\n  ".join(lines) + "\n"
        return out + ")"


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


class Entry(NamedTuple):
    """One step of the walk: a module or a tensor, its dotted path, the module whose field
    holds it (None for the root) and its name within that module (``layers.0`` for a list)."""

    path: str
    owner: Module | None
    local: str
    value: Any


_ATOMS = frozenset({int, float, str, bool, type(None)})


def _is_parameter(v: Any) -> bool:
    return isinstance(v, Parameter)


def _is_buffer(v: Any) -> bool:
    return isinstance(v, Tensor) and not isinstance(v, Parameter)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor)


class _Walk:
    """The one walk of a module tree, in PyTorch's order: a module, then its own parameters,
    then its own buffers, then its other fields (submodules, lists, tuples and dicts of them)
    depth first. Every listing of a Module (parameters, buffers, modules, children,
    ``state_dict``, the naming of new fields, the cached parameter list) filters its entries.

    ``dedupe`` visits a shared module once (a cycle is never followed either way);
    ``recurse=False`` lists the modules found in the root's fields without entering them.
    ``mutable`` is set once a plain list or dict holding modules or tensors was crossed (it
    can change unseen, so a parameter list read through it cannot be cached).
    """

    __slots__ = ("active", "dedupe", "mutable", "recurse", "seen")

    def __init__(
        self, dedupe: bool = True, recurse: bool = True, seen: set[int] | None = None
    ) -> None:
        self.dedupe = dedupe
        self.recurse = recurse
        self.seen: set[int] = seen if seen is not None else set()  # modules visited
        self.active: set[int] = set()  # modules on the current path (cycles)
        self.mutable = False

    def run(self, root: Any, path: str = "", base: str | None = None) -> Iterator[Entry]:
        """Entries for ``root`` (a Module, or a list/dict of them) at ``path``; its fields are
        named ``base + name`` (``path + "."`` unless given: ``state_dict`` takes a raw prefix)."""
        if isinstance(root, Module):
            if base is None:
                base = path + "." if path else ""
            return self._module(root, path, None, "", base)
        return self._value(root, path, None, "")

    def _module(
        self, m: Module, path: str, owner: Module | None, local: str, base: str
    ) -> Iterator[Entry]:
        if id(m) in self.active or (self.dedupe and id(m) in self.seen):
            return
        self.seen.add(id(m))
        yield Entry(path, owner, local, m)
        fields = m._fields()
        for k, v in fields:
            if isinstance(v, Parameter):
                yield Entry(base + k, m, k, v)
        for k, v in fields:
            if isinstance(v, Tensor) and not isinstance(v, Parameter):
                yield Entry(base + k, m, k, v)
        self.active.add(id(m))
        try:
            for k, v in fields:
                if not isinstance(v, Tensor):
                    yield from self._value(v, base + k, m, k)
        finally:
            self.active.discard(id(m))

    def _value(self, v: Any, path: str, owner: Module | None, local: str) -> Iterator[Entry]:
        if type(v) in _ATOMS:  # settings such as kernel sizes: most fields
            return
        if isinstance(v, Tensor):
            yield Entry(path, owner, local, v)
        elif isinstance(v, Module):
            if self.recurse or owner is None:
                yield from self._module(v, path, owner, local, path + ".")
            else:
                yield Entry(path, owner, local, v)
        elif isinstance(v, (list, tuple, dict)):
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, item in items:
                if type(item) not in _ATOMS:
                    self.mutable = self.mutable or not isinstance(v, tuple)
                    yield from self._value(item, f"{path}.{k}", owner, f"{local}.{k}")


def _unique_tensors(
    entries: Iterable[Entry], keep: Callable[[Any], bool]
) -> Iterator[tuple[str, Any]]:
    """``(path, tensor)`` for the entries whose value ``keep`` accepts, each tensor once."""
    seen: set[int] = set()
    for e in entries:
        if keep(e.value) and id(e.value) not in seen:
            seen.add(id(e.value))
            yield e.path, e.value


def _adopt(name: str, value: Any) -> None:
    """Tell a newly set value its path: modules their paths, parameters their names (a
    parameter inside a module takes the longer path of an outer module it is set on)."""
    seen: set[int] = set()
    for e in _Walk(dedupe=True).run(value, name):
        v = e.value
        if isinstance(v, Module):
            if v._path is None or e.path.endswith("." + v._path):
                object.__setattr__(v, "_path", e.path)
        elif isinstance(v, Parameter) and id(v) not in seen:
            seen.add(id(v))
            if v.name is None or (e.owner is not None and e.path.endswith("." + v.name)):
                v.name = e.path


def _indent(s: str, n: int) -> str:
    first, *rest = s.split("\n")
    return "\n".join([first] + [(" " * n + line) if line.strip() else "" for line in rest])
