"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict, and the
Residual combinator.

Their items are named ``0``, ``1``, ... (or by their keys), so ``Sequential`` and ``ModuleList``
give the same ``state_dict`` keys as in PyTorch (``layers.0.weight``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..._tensor import Parameter, Tensor
from .._hooks import structure_changed
from .._module import Module, _adopt


def _check_module(m: Any, where: str) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{where}: items must be Modules, got {type(m).__name__}")
    return m


class _Modules(Module):
    """A module whose submodules live in one ordered dict ``_modules``, as in PyTorch: every
    Module set on it (an item, ``add_module``, or an attribute) is an item, in the order set.
    Parameters and buffers set on it are its own, listed before the items."""

    _modules: dict[str, Module]

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "_modules", {})

    def _fields(self) -> list[tuple[str, Any]]:
        return super()._fields() + list(self._modules.items())

    def __setattr__(self, name: str, value: Any) -> None:
        mods = self.__dict__.get("_modules")
        if mods is None or not (isinstance(value, Module) or name in mods):
            super().__setattr__(name, value)
        elif name[0] == "_" and name not in self._registered:
            object.__setattr__(self, name, value)
        else:
            self._put(name, _check_module(value, f"{type(self).__name__}.{name}"))

    def __getattr__(self, name: str) -> Any:
        # items read as attributes (Sequential(OrderedDict(conv=...)).conv), as in PyTorch
        mods = self.__dict__.get("_modules")
        if mods is not None and name in mods:
            return mods[name]
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__.get("_modules", ()):
            structure_changed()
            del self._modules[name]
        else:
            super().__delattr__(name)

    def _put(self, key: str, m: Module) -> None:
        structure_changed()
        self._modules[key] = m
        _adopt(key, m)

    def _renumber(self) -> None:
        """Keys ``0..n-1`` again after a deletion (PyTorch renumbers every key)."""
        structure_changed()
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._put(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)


class Sequential(_Modules):
    """Modules applied one after the other; items are named ``0``, ``1``, ... or by dict keys.

    As ``torch.nn.Sequential``: ``add_module``, ``append``, ``extend``, ``insert``, ``pop``,
    indexing, slicing (a new Sequential), item assignment and deletion (the keys are then
    renumbered ``0..n-1``), ``+`` and ``+=``.

    >>> import tapegrad as tg
    >>> net = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.ReLU(), tg.nn.Linear(8, 2))
    >>> net(tg.ones((3, 4))).shape, list(net.state_dict())[:2]
    ((3, 2), ['0.weight', '0.bias'])
    """

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], Mapping):
            for k, m in args[0].items():
                self.add_module(str(k), _check_module(m, "Sequential"))
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), _check_module(m, "Sequential"))

    def forward(self, input: Any) -> Any:
        for m in self._modules.values():
            input = m(input)
        return input

    def __getitem__(self, idx: int | slice) -> Any:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return type(self)(dict(items[idx]))
        return items[_index(idx, len(items), type(self).__name__)][1]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self._modules), type(self).__name__)]
        setattr(self, key, module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)
        doomed = keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys), "del")]]
        for k in doomed:
            delattr(self, k)
        self._renumber()

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(
                f"Sequential + {type(other).__name__}: only a Sequential can be added to one"
            )
        return Sequential(*self, *other)

    def __iadd__(self, other: Sequential) -> Sequential:
        offset = len(self)
        for i, m in enumerate(other):
            self.add_module(str(i + offset), m)
        return self

    def append(self, module: Module) -> Sequential:
        """Add a module at the end (key ``str(len(self))``)."""
        self.add_module(str(len(self)), _check_module(module, "Sequential.append"))
        return self

    def extend(self, modules: Iterable[Module]) -> Sequential:
        """Add modules at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> Sequential:
        """Insert a module before ``index`` (``-len(self) <= index <= len(self)``)."""
        _check_module(module, "Sequential.insert")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexError(f"{type(self).__name__}.insert: index {index} out of range for {n}")
        index = index + n if index < 0 else index
        for i in range(n, index, -1):  # PyTorch's shift: keys stay in order 0..n
            self._put(str(i), self._modules[str(i - 1)])
        self._put(str(index), module)
        return self

    def pop(self, key: int | slice) -> Any:
        """Remove the item(s) at ``key`` and return them (the rest are renumbered)."""
        v = self[key]
        del self[key]
        return v


class ModuleList(_Modules):
    """A list of modules whose items are named ``0``, ``1``, ... (it has no forward).

    As ``torch.nn.ModuleList``: ``append``, ``extend``, ``insert``, ``pop``, indexing, item
    assignment and deletion (keys renumbered ``0..n-1``), ``+`` and ``+=``. A slice is a new
    ModuleList over the same modules, which keep their names (as a view would).

    >>> import tapegrad as tg
    >>> layers = tg.nn.ModuleList([tg.nn.Linear(2, 2) for _ in range(3)])
    >>> len(layers), list(layers.state_dict())[-1]
    (3, '2.bias')
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _key(self, idx: int) -> str:
        return str(_index(idx, len(self._modules), "ModuleList"))

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):  # a view's worth of work: no re-adoption, no structure change
            part = type(self).__new__(type(self))
            items = list(self._modules.values())[idx]
            object.__setattr__(part, "_modules", {str(i): m for i, m in enumerate(items)})
            return part
        return self._modules[self._key(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._key(idx), _check_module(module, "ModuleList"))

    def __delitem__(self, idx: int | slice) -> None:
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                delattr(self, str(k))
        else:
            delattr(self, self._key(idx))
        self._renumber()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module: Module) -> ModuleList:
        """Add a module at the end."""
        self.add_module(str(len(self)), _check_module(module, "ModuleList"))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add modules at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert a module before ``index`` (a negative index counts from the end, as in a
        list)."""
        _check_module(module, "ModuleList")
        n = len(self._modules)
        index = min(max(index + n if index < 0 else index, 0), n)
        for i in range(n, index, -1):
            self._put(str(i), self._modules[str(i - 1)])
        self._put(str(index), module)

    def pop(self, key: int | slice) -> Any:
        """Remove the item(s) at ``key`` and return them (the rest are renumbered)."""
        v = self[key]
        del self[key]
        return v

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "ModuleList has no forward(): iterate over it (for layer in self.layers: x = layer(x)) "
            "or use nn.Sequential"
        )


class ModuleDict(_Modules):
    """A dict of modules whose items are named by their keys (it has no forward).

    >>> import tapegrad as tg
    >>> heads = tg.nn.ModuleDict({"cls": tg.nn.Linear(4, 3), "box": tg.nn.Linear(4, 4)})
    >>> sorted(heads.keys()), heads["cls"].out_features
    (['box', 'cls'], 3)
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        try:
            return self._modules[key]
        except KeyError:
            raise KeyError(
                f"ModuleDict has no key {key!r}; its keys are {list(self._modules)}"
            ) from None

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings, got {type(key).__name__}")
        self.add_module(key, _check_module(module, "ModuleDict"))

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - the KeyError naming the keys
        delattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Any:
        """The keys, in insertion order."""
        return self._modules.keys()

    def values(self) -> Any:
        """The modules, in insertion order."""
        return self._modules.values()

    def items(self) -> Any:
        """``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        """Remove every item."""
        structure_changed()
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace items from a mapping or from ``(key, module)`` pairs."""
        pairs = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules
        for k, m in pairs:
            self[k] = m

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward(): index it (self.heads['cls'](x))")


def _as_parameter(v: Any) -> Any:
    # as PyTorch: a plain tensor set in a parameter container becomes a Parameter
    if isinstance(v, Tensor) and not isinstance(v, Parameter):
        return Parameter(v._data)
    return v


class ParameterList(Module):
    """A list of parameters named ``0``, ``1``, ... (a plain Tensor becomes a Parameter).

    >>> import tapegrad as tg
    >>> ps = tg.nn.ParameterList([tg.zeros(2), tg.ones(3)])
    >>> [(n, p.shape) for n, p in ps.named_parameters()]
    [('0', (2,)), ('1', (3,))]
    """

    _size: int = 0

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        if values is not None:
            self.extend(values)

    def _key(self, idx: int) -> str:
        return str(_index(idx, self._size, "ParameterList"))

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return type(self)([self[i] for i in range(self._size)[idx]])
        return getattr(self, self._key(idx))

    def __setitem__(self, idx: int, value: Any) -> None:
        self._set(self._key(idx), value)

    def _set(self, key: str, value: Any) -> None:
        value = _as_parameter(value)
        if isinstance(value, Parameter) or value is None:
            self.register_parameter(key, value)
        else:
            setattr(self, key, value)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._size))

    def __iadd__(self, values: Iterable[Any]) -> ParameterList:
        return self.extend(values)

    def append(self, value: Any) -> ParameterList:
        """Add a parameter at the end."""
        object.__setattr__(self, "_size", self._size + 1)
        self._set(str(self._size - 1), value)
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        """Add parameters at the end."""
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(
            f"({i}): Parameter containing: [{p.dtype} of size {p.shape}]"
            for i, p in enumerate(self)
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ParameterList has no forward(): index it (self.params[0])")


class ParameterDict(Module):
    """A dict of parameters named by their keys (a plain Tensor becomes a Parameter).

    >>> import tapegrad as tg
    >>> pd = tg.nn.ParameterDict({"scale": tg.ones(2), "shift": tg.zeros(2)})
    >>> list(pd.state_dict())
    ['scale', 'shift']
    """

    _keys: dict[str, None]

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        object.__setattr__(self, "_keys", {})
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(f"ParameterDict has no key {key!r}; its keys are {list(self._keys)}")
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"ParameterDict: keys must be strings, got {type(key).__name__}")
        value = _as_parameter(value)
        if isinstance(value, Parameter) or value is None:
            self.register_parameter(key, value)
        else:
            self._register(key)
            setattr(self, key, value)
        self._keys[key] = None

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - the KeyError naming the keys
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> Any:
        """The keys, in insertion order."""
        return self._keys.keys()

    def values(self) -> Iterator[Any]:
        """The parameters, in insertion order."""
        return (self[k] for k in self._keys)

    def items(self) -> Iterator[tuple[str, Any]]:
        """``(key, parameter)`` pairs, in insertion order."""
        return ((k, self[k]) for k in self._keys)

    def get(self, key: str, default: Any = None) -> Any:
        """The parameter at ``key``, or ``default``."""
        return self[key] if key in self._keys else default

    def pop(self, key: str) -> Any:
        """Remove ``key`` and return its parameter."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        """Remove every item."""
        for k in list(self._keys):
            del self[k]

    def update(self, parameters: Any) -> None:
        """Add or replace items from a mapping or from ``(key, parameter)`` pairs."""
        pairs = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in pairs:
            self[k] = v

    def extra_repr(self) -> str:
        return "\n".join(
            f"({k}): Parameter containing: [{p.dtype} of size {p.shape}]" for k, p in self.items()
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ParameterDict has no forward(): index it (self.params['w'])")


class Residual(Module):
    """``x + module(x)``: a residual connection around any shape-preserving module.

    >>> import tapegrad as tg
    >>> block = tg.nn.Residual(tg.nn.Sequential(tg.nn.Linear(4, 4), tg.nn.ReLU()))
    >>> block(tg.ones((2, 4))).shape, list(block.state_dict())[0]
    ((2, 4), 'module.0.weight')
    """

    module: Module

    def __init__(self, module: Module) -> None:
        super().__init__()
        self.module = _check_module(module, "Residual")

    def forward(self, input: Tensor) -> Tensor:
        out = self.module(input)
        if out.shape != input.shape:
            raise ValueError(
                f"Residual: the wrapped {type(self.module).__name__} maps shape {input.shape} to "
                f"{out.shape}; a residual connection needs the same shape in and out"
            )
        return input + out


def _index(idx: int, n: int, where: str) -> int:
    if not isinstance(idx, int):
        raise TypeError(f"{where}: index must be an int or a slice, got {type(idx).__name__}")
    if not -n <= idx < n:
        raise IndexError(f"{where}: index {idx} is out of range for {n} items")
    return idx % n
