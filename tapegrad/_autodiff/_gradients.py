"""Gradients: the result of a backward pass, a value keyed by tensor identity, which also says
why a tensor that was asked for got no gradient."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .._backend import np, xp_of
from .._tensor import Tensor


class MissingGradientError(KeyError):
    """No gradient for a tensor; the message says why (a KeyError, printed without quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TapeFacts:
    """What a Gradients remembers of its tape to explain a missing gradient (not the tape
    itself, which would keep every saved array alive)."""

    __slots__ = ("leaf_tids", "watch_parameters", "with_style", "watched")

    def __init__(self, tape: Any, leaves: dict[int, Tensor]) -> None:
        self.leaf_tids = frozenset(leaves)
        self.watch_parameters = tape.watch_parameters
        self.with_style = tape._used_with
        self.watched = frozenset(map(id, tape._leaves.values()))

    def reason(self, t: Tensor) -> str:
        if t._is_param and not t.requires_grad and id(t) not in self.watched:  # type: ignore[attr-defined]
            return "it is frozen (requires_grad=False)"
        if t._tid is not None and t._tid in self.leaf_tids:
            return NO_PATH
        if t._is_param and not self.watch_parameters:
            return (
                "the tape was opened with watch_parameters=False and never watched it "
                "(watch it with tape.watch(param) or tape.watch(module))"
            )
        return "it never met the tape: " + (
            "it was not used while the tape was open (used outside the `with` block, or only "
            "inside tg.no_grad())"
            if self.with_style
            else "it was not used in the forward pass, or used only by ops whose inputs were on "
            "no open tape (trace that branch's float input too with x.trace(tape), watch its "
            "parameters with tape.watch(module), or open the tape with `with tg.Tape() as tape:`)"
        )


NO_PATH = (
    "it is on the tape but no path leads from it to the target: it was not used to compute "
    "the target (its branch does not reach it), or only through stop_gradient/detach or "
    "tg.no_grad()"
)


def tname(t: Tensor) -> str:
    return getattr(t, "name", None) or f"tensor of shape {tuple(t.shape)}"


def _sum_squares(a: Any) -> float:
    # BLAS's dot for float32/64: one pass, no squared copy (0.19 -> 0.05 ms over
    # word_language_model's 12 gradients); half precision squares in its own dtype as before
    if a.dtype.itemsize >= 4:
        return float(xp_of(a).vdot(a, a))
    return float((a * a).sum())


class Gradients:
    """Gradients keyed by tensor identity: ``g[p]``, ``g.get(p)``, ``items()``, ``+``, ``*``.

    A value, not state on tensors: accumulate micro-batches with ``g = g + g2`` or
    ``tape.gradient(loss, into=g)``. Values are Tensors (so a gradient penalty can
    differentiate them); ``named(module)`` gives numpy arrays by dotted name.
    ``missing(module)`` lists the parameters that got no gradient and why.

    >>> import tapegrad as tg
    >>> w = tg.Parameter(tg.tensor([3.0, 4.0]))
    >>> with tg.Tape() as tape:
    ...     loss = (w * w).sum()
    >>> g = tape.gradient(loss)
    >>> g[w].tolist(), round(g.global_norm(), 4)
    ([6.0, 8.0], 10.0)
    >>> (g + g)[w].tolist(), (0.5 * g)[w].tolist()
    ([12.0, 16.0], [3.0, 4.0])
    """

    __slots__ = ("_d", "_reasons", "_facts")

    def __init__(self, pairs: Iterable[tuple[Tensor, Tensor]] = ()) -> None:
        self._d: dict[int, tuple[Tensor, Tensor]] = {id(t): (t, g) for t, g in pairs}
        # id -> (tensor, reason) for tensors known to have been asked for and got none
        self._reasons: dict[int, tuple[Tensor, str]] = {}
        self._facts: TapeFacts | None = None

    # -- mapping ------------------------------------------------------------------------------
    def __getitem__(self, t: Tensor) -> Tensor:
        e = self._d.get(id(t))
        if e is None:
            raise MissingGradientError(f"no gradient for {tname(t)}: {self.why_missing(t)}")
        return e[1]

    def get(self, t: Tensor, default: Any = None) -> Any:
        """The gradient of ``t``, or ``default`` when it has none."""
        e = self._d.get(id(t))
        return default if e is None else e[1]

    def __contains__(self, t: object) -> bool:
        return id(t) in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.keys())

    def keys(self) -> list[Tensor]:
        """The tensors that have a gradient."""
        return [t for t, _ in self._d.values()]

    def values(self) -> list[Tensor]:
        """The gradients, in the order of ``keys()``."""
        return [g for _, g in self._d.values()]

    def items(self) -> list[tuple[Tensor, Tensor]]:
        """``(tensor, gradient)`` pairs."""
        return list(self._d.values())

    # -- arithmetic ---------------------------------------------------------------------------
    def _derive(self, pairs: Iterable[tuple[Tensor, Tensor]]) -> Gradients:
        out = Gradients(pairs)
        out._reasons = dict(self._reasons)
        out._facts = self._facts
        return out

    def __add__(self, other: Gradients) -> Gradients:
        if not isinstance(other, Gradients):
            return NotImplemented
        out = self._derive(self._d.values())
        out._accumulate(other)
        return out

    def __radd__(self, other: Any) -> Gradients:
        if isinstance(other, (int, float)) and other == 0:  # sum([g1, g2, ...]) starts at 0
            return self
        return NotImplemented

    def __mul__(self, s: float) -> Gradients:
        if not isinstance(s, (int, float, np.number)) or isinstance(s, bool):
            return NotImplemented
        return self._derive((t, g * s) for t, g in self._d.values())

    __rmul__ = __mul__

    def __truediv__(self, s: float) -> Gradients:
        return self * (1.0 / s)

    def _accumulate(self, other: Gradients) -> None:
        for k, (t, g) in other._d.items():
            e = self._d.get(k)
            self._d[k] = (t, g if e is None else e[1] + g)
        reasons = {**self._reasons, **other._reasons}
        self._reasons = {k: r for k, r in reasons.items() if k not in self._d}
        if self._facts is None:
            self._facts = other._facts

    # -- norms --------------------------------------------------------------------------------
    def global_norm(self) -> float:
        """The L2 norm of all gradients together, as a Python float."""
        return float(np.sqrt(sum(_sum_squares(g._data) for _, g in self._d.values())))

    def clip_by_global_norm(self, max_norm: float) -> Gradients:
        """Scaled by ``max_norm / (norm + 1e-6)`` when the global norm exceeds ``max_norm``
        (as ``torch.nn.utils.clip_grad_norm_``); unchanged otherwise."""
        if not max_norm > 0:
            raise ValueError(f"clip_by_global_norm: max_norm must be > 0, got {max_norm}")
        scale = max_norm / (self.global_norm() + 1e-6)
        return self if scale >= 1.0 else self * scale

    # -- names and missing gradients -----------------------------------------------------------
    def named(self, module: Any) -> dict[str, Any]:
        """``{dotted_name: numpy array}`` for the parameters of ``module`` that have a gradient."""
        return {n: g.numpy() for n, p in module.named_parameters() if (g := self.get(p)) is not None}

    def why_missing(self, t: Tensor) -> str | None:
        """Why ``t`` has no gradient here (None when it has one).

        >>> import tapegrad as tg
        >>> a, b = tg.Parameter(tg.ones(2)), tg.Parameter(tg.ones(2))
        >>> with tg.Tape() as tape:
        ...     loss = (a * 2).sum()
        >>> tape.gradient(loss).why_missing(b)
        'it never met the tape: it was not used while the tape was open (used outside the `with` block, or only inside tg.no_grad())'
        """
        if id(t) in self._d:
            return None
        e = self._reasons.get(id(t))
        if e is not None:
            return e[1]
        if self._facts is not None:
            return self._facts.reason(t)
        if t._is_param and not t.requires_grad:  # type: ignore[attr-defined]
            return "it is frozen (requires_grad=False)"
        return "these Gradients hold no entry for it"

    def missing(self, params: Any = None) -> dict[str, str]:
        """``{dotted_name: reason}`` for the trainable parameters that got no gradient.

        ``params`` is a Module (names are its dotted paths), an iterable of Parameters (named by
        ``p.name``), or None: the tensors this request knows were asked for or met the tape and
        got none. Frozen parameters (``requires_grad=False``) are expected to have none and are
        not listed. Optimizers use it to refuse a step that would silently skip a parameter.

        >>> import tapegrad as tg
        >>> class Two(tg.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.used = tg.Parameter(tg.ones(2))
        ...         self.unused = tg.Parameter(tg.ones(2))
        >>> m = Two()
        >>> with tg.Tape() as tape:
        ...     loss = (m.used * 3).sum()
        >>> list(tape.gradient(loss, m).missing(m))
        ['unused']
        """
        if params is None:
            return {tname(t): r for t, r in self._reasons.values()}
        if hasattr(params, "named_parameters"):
            named: Iterable[tuple[str, Tensor]] = params.named_parameters()
        else:
            named = (
                (getattr(p, "name", None) or f"parameters[{i}] (shape {tuple(p.shape)})", p)
                for i, p in enumerate(params)
            )
        return {
            name: self.why_missing(p) or ""
            for name, p in named
            if id(p) not in self._d and not (p._is_param and not p.requires_grad)  # type: ignore[attr-defined]
        }

    def __repr__(self) -> str:
        names = [str(tname(t)) for t, _ in self._d.values()]
        more = "..." if len(names) > 6 else ""
        miss = f", {len(self._reasons)} missing" if self._reasons else ""
        return f"Gradients({len(names)} tensors: {', '.join(names[:6])}{more}{miss})"
