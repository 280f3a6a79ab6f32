"""Containers: Sequential, ModuleList, ModuleDict, and the Residual combinator.

Their items are named ``0``, ``1``, ... (or by their keys), so ``Sequential`` and ``ModuleList``
give the same ``state_dict`` keys as in PyTorch (``layers.0.weight``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..._tensor import Tensor
from .._module import Module, _adopt, structure_changed


def _check_module(m: Any, where: str) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{where}: items must be Modules, got {type(m).__name__}")
    return m


class Sequential(Module):
    """Modules applied one after the other; items are named ``0``, ``1``, ... or by dict keys.

    >>> import tapegrad as tg
    >>> net = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.ReLU(), tg.nn.Linear(8, 2))
    >>> net(tg.ones((3, 4))).shape, list(net.state_dict())[:2]
    ((3, 2), ['0.weight', '0.bias'])
    """

    _modules: dict[str, Module]

    def __init__(self, *args: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_modules", {})
        if len(args) == 1 and isinstance(args[0], Mapping):
            for k, m in args[0].items():
                self._put(str(k), m)
        else:
            for i, m in enumerate(args):
                self._put(str(i), m)

    def _put(self, key: str, m: Any) -> None:
        structure_changed()
        self._modules[key] = _check_module(m, type(self).__name__)
        _adopt(key, m)

    def _fields(self) -> list[tuple[str, Any]]:
        return list(self._modules.items())

    def __getattr__(self, name: str) -> Any:
        # named items (Sequential(OrderedDict(conv=...))) read as attributes, as in PyTorch
        mods = self.__dict__.get("_modules")
        if mods is not None and name in mods:
            return mods[name]
        raise AttributeError(f"{type(self).__name__} has no attribute '{name}'")

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
        structure_changed()
        key = list(self._modules)[_index(idx, len(self._modules), type(self).__name__)]
        self._put(key, module)

    def __delitem__(self, idx: int | slice) -> None:
        structure_changed()
        keys = list(self._modules)
        doomed = keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys), "del")]]
        for k in doomed:
            del self._modules[k]
        # renumber integer keys so that state_dict names stay 0..n-1 (as PyTorch)
        if all(k.isdigit() for k in self._modules):
            items = list(self._modules.values())
            self._modules.clear()
            for i, m in enumerate(items):
                self._put(str(i), m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        """Add a module at the end."""
        self._put(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Sequential:
        """Add modules at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> Sequential:
        """Insert a module before ``index``."""
        items = list(self._modules.values())
        n = len(items)
        if not -n <= index <= n:
            raise IndexError(f"{type(self).__name__}.insert: index {index} out of range for {n}")
        items.insert(index % (n + 1) if index < 0 else index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self._put(str(i), m)
        return self


class ModuleList(Module):
    """A list of modules whose items are named ``0``, ``1``, ... (it has no forward).

    >>> import tapegrad as tg
    >>> layers = tg.nn.ModuleList([tg.nn.Linear(2, 2) for _ in range(3)])
    >>> len(layers), list(layers.state_dict())[-1]
    (3, '2.bias')
    """

    _items: list[Module]

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        object.__setattr__(self, "_items", [])
        if modules is not None:
            self.extend(modules)

    def _fields(self) -> list[tuple[str, Any]]:
        return [(str(i), m) for i, m in enumerate(self._items)]

    def _rename(self) -> None:
        for i, m in enumerate(self._items):
            _adopt(str(i), m)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):  # a view's worth of work: no re-adoption, no structure change
            part = type(self).__new__(type(self))
            object.__setattr__(part, "_items", self._items[idx])
            return part
        return self._items[_index(idx, len(self._items), "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        structure_changed()
        i = _index(idx, len(self._items), "ModuleList")
        self._items[i] = _check_module(module, "ModuleList")
        _adopt(str(i), module)

    def __delitem__(self, idx: int | slice) -> None:
        structure_changed()
        if isinstance(idx, slice):
            del self._items[idx]
        else:
            del self._items[_index(idx, len(self._items), "ModuleList")]
        self._rename()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        """Add a module at the end."""
        structure_changed()
        self._items.append(_check_module(module, "ModuleList"))
        _adopt(str(len(self._items) - 1), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add modules at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert a module before ``index``."""
        structure_changed()
        self._items.insert(index, _check_module(module, "ModuleList"))
        self._rename()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "ModuleList has no forward(): iterate over it (for layer in self.layers: x = layer(x)) "
            "or use nn.Sequential"
        )


class ModuleDict(Module):
    """A dict of modules whose items are named by their keys (it has no forward).

    >>> import tapegrad as tg
    >>> heads = tg.nn.ModuleDict({"cls": tg.nn.Linear(4, 3), "box": tg.nn.Linear(4, 4)})
    >>> sorted(heads.keys()), heads["cls"].out_features
    (['box', 'cls'], 3)
    """

    _items: dict[str, Module]

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        object.__setattr__(self, "_items", {})
        if modules is not None:
            self.update(modules)

    def _fields(self) -> list[tuple[str, Any]]:
        return list(self._items.items())

    def __getitem__(self, key: str) -> Module:
        try:
            return self._items[key]
        except KeyError:
            raise KeyError(
                f"ModuleDict has no key {key!r}; its keys are {list(self._items)}"
            ) from None

    def __setitem__(self, key: str, module: Module) -> None:
        structure_changed()
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings, got {type(key).__name__}")
        self._items[key] = _check_module(module, "ModuleDict")
        _adopt(key, module)

    def __delitem__(self, key: str) -> None:
        structure_changed()
        del self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> Any:
        """The keys, in insertion order."""
        return self._items.keys()

    def values(self) -> Any:
        """The modules, in insertion order."""
        return self._items.values()

    def items(self) -> Any:
        """``(key, module)`` pairs, in insertion order."""
        return self._items.items()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        structure_changed()
        return self._items.pop(key)

    def clear(self) -> None:
        """Remove every item."""
        structure_changed()
        self._items.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace items from a mapping or from ``(key, module)`` pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for k, m in pairs:
            self[k] = m

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict has no forward(): index it (self.heads['cls'](x))")


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
