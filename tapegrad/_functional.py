"""The functional layer: ``grad`` and ``value_and_grad`` on top of the tape (JAX-style).

Each call opens a tape that watches only the arguments at ``argnums`` (not the parameters the
function happens to use), runs the function, and makes one backward pass for all of them.
Calls nest: inside an outer ``grad`` (or an open outer tape) the inner backward pass is
recorded, so ``grad(grad(f))`` gives second derivatives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._autodiff import Tape, trace
from ._autodiff._request import result, target_seeds
from ._tensor import Parameter, Tensor
from .ops._common import as_tensor


def _positions(argnums: int | tuple[int, ...], nargs: int, who: str) -> list[int]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise ValueError(f"{who}: argnums is empty; give at least one argument position")
    out = []
    for n in nums:
        if not isinstance(n, int):
            raise TypeError(f"{who}: argnums must be ints, got {n!r}")
        if not -nargs <= n < nargs:
            raise ValueError(
                f"{who}: argnums={argnums!r} but the function was called with {nargs} positional "
                "argument(s); differentiated arguments must be passed positionally"
            )
        out.append(n % nargs)
    if len(set(out)) != len(out):
        raise ValueError(f"{who}: argnums={argnums!r} names an argument twice")
    return out


def value_and_grad(
    f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """``f``'s value and its gradient with respect to the arguments at ``argnums``.

    ``f`` returns a scalar Tensor (or ``(scalar, aux)`` with ``has_aux=True``). An argument
    that is a Module is differentiated with respect to its trainable parameters and gives a
    ``Gradients`` (``.missing(module)`` says which got none and why); a Tensor, array or number
    gives a Tensor of its shape. With an int ``argnums`` the gradient is that one value; with a
    tuple, a tuple in the same order. The result is ``(value, grads)``, or
    ``((value, aux), grads)`` with ``has_aux``.

    >>> import tapegrad as tg
    >>> v, g = tg.value_and_grad(lambda x: (x ** 3).sum())(tg.tensor([1.0, 2.0]))
    >>> v.item(), g.tolist()
    (9.0, [3.0, 12.0])
    >>> (v, aux), (gx, gy) = tg.value_and_grad(
    ...     lambda x, y: ((x * y).sum(), "aux"), argnums=(0, 1), has_aux=True
    ... )(tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0]))
    >>> aux, gx.tolist(), gy.tolist()
    ('aux', [3.0, 4.0], [1.0, 2.0])
    """
    who = "value_and_grad"

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        from .nn._module import Module  # noqa: PLC0415  # cycle: nn sits above

        positions = _positions(argnums, len(args), who)
        args_l = list(args)
        # per differentiated argument: (Module, its trainable parameters) or (None, [tensor])
        wrt: list[tuple[Any, list[Any]]] = []
        with Tape(watch_parameters=False) as tape:
            for n in positions:
                a = args_l[n]
                if isinstance(a, Module):
                    params = [p for p in a.parameters() if p.requires_grad]
                    tape.watch(params)
                    wrt.append((a, params))
                    continue
                t = as_tensor(a)
                if t.dtype.kind not in "fc":
                    raise TypeError(
                        f"{who}: argument {n} has dtype {t.dtype} (shape {tuple(t.shape)}); only "
                        "float arguments can be differentiated. Leave it out of argnums (integer "
                        "indices need no gradient) or pass floats"
                    )
                if isinstance(t, Parameter):
                    tape.watch(t)
                else:
                    t = trace(t, tape)  # a new leaf; an outer tape still sees through it
                    args_l[n] = t
                wrt.append((None, [t]))
            out = f(*args_l, **kwargs)
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                tape.release()
                raise TypeError(
                    f"{who}(has_aux=True): the function must return a pair (value, aux), got "
                    f"{type(out).__name__}"
                )
            value, aux = out
        else:
            value, aux = out, None
        if not isinstance(value, Tensor) or value.size != 1:
            tape.release()
            what = (
                f"a tensor of shape {tuple(value.shape)}"
                if isinstance(value, Tensor)
                else type(value).__name__
            )
            raise TypeError(
                f"{who}: the function must return a scalar Tensor (one element), got {what}; "
                "reduce it (e.g. .sum() or .mean()), or for a vector-Jacobian product use "
                "tape.gradient(y, x, output_gradients=v)"
                + ("" if has_aux else "; with extra outputs, pass has_aux=True")
            )
        # one backward pass for every differentiated argument
        flat = [t for _, ts in wrt for t in ts]
        seeds = target_seeds(tape, value, None, strict=False)
        results, leaves, facts = tape._run(seeds, flat, near=[value])
        grads = [
            result(ts[0] if m is None else m, ts, m is not None, results, leaves, facts, None)
            for m, ts in wrt
        ]
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((value, aux) if has_aux else value), g

    return wrapped


def grad(
    f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments at ``argnums``.

    Returns what ``value_and_grad`` returns as its gradient, or ``(grads, aux)`` with
    ``has_aux=True``. Calls nest for higher derivatives.

    >>> import tapegrad as tg
    >>> tg.grad(lambda x: (x * x).sum())(tg.tensor([3.0])).tolist()
    [6.0]
    >>> d2 = tg.grad(lambda x: tg.grad(lambda y: (y ** 3).sum())(x).sum())
    >>> d2(tg.tensor([1.0, 2.0])).tolist()
    [6.0, 12.0]
    """
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        val, g = vg(*args, **kwargs)
        return (g, val[1]) if has_aux else g

    return wrapped
