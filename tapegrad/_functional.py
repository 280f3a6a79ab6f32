"""The functional layer: ``grad`` and ``value_and_grad`` on top of the tape (JAX-style)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._tape import Tape, trace
from ._tensor import Parameter, Tensor
from .ops._common import as_tensor


def value_and_grad(
    f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """``f``'s value and its gradient with respect to the arguments at ``argnums``.

    An argument that is a Module is differentiated with respect to its parameters (a
    Gradients); a Tensor or array gives a Tensor. With ``has_aux``, ``f`` returns
    ``(value, aux)`` and the result is ``((value, aux), grads)``.

    >>> import tapegrad as tg
    >>> v, g = tg.value_and_grad(lambda x: (x ** 3).sum())(tg.tensor([1.0, 2.0]))
    >>> v.item(), g.tolist()
    (9.0, [3.0, 12.0])
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        from .nn._module import Module  # noqa: PLC0415

        for n in nums:
            if n >= len(args):
                raise ValueError(
                    f"value_and_grad: argnums {argnums} but the function got {len(args)} positional arguments"
                )
        args = list(args)
        sources: list[Any] = []
        with Tape(watch_parameters=False) as tape:
            for n in nums:
                a = args[n]
                if isinstance(a, Module):
                    tape.watch(a)
                    sources.append(a)
                elif isinstance(a, Parameter):
                    tape.watch(a)
                    sources.append(a)
                else:
                    t = trace(as_tensor(a), tape)
                    args[n] = t
                    sources.append(t)
            out = f(*args, **kwargs)
        value, aux = (out if has_aux else (out, None))
        if has_aux and not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("value_and_grad(has_aux=True): the function must return (value, aux)")
        if not isinstance(value, Tensor):
            raise TypeError(f"value_and_grad: the function must return a Tensor, got {type(value).__name__}")
        persistent_needed = len(sources) > 1
        if persistent_needed:
            tape.persistent = True
        grads = [tape.gradient(value, s) for s in sources]
        if persistent_needed:
            tape.release()
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((value, aux) if has_aux else value), g

    return wrapped


def grad(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments at ``argnums``.

    >>> import tapegrad as tg
    >>> tg.grad(lambda x: (x * x).sum())(tg.tensor([3.0])).tolist()
    [6.0]
    """
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        (val, g) = vg(*args, **kwargs)
        if has_aux:
            return g, val[1]
        return g

    return wrapped
