"""``autograd``'s differential operators on tapegrad's functional layer (a test adapter).

Only what HIPS autograd's own test files import: ``grad``, ``value_and_grad``,
``elementwise_grad``, ``jacobian``, ``deriv``, ``hessian`` and the container builtins.
Arguments are made float64 first, as autograd's numpy arrays are.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as _np

import tapegrad as _tg
from tapegrad._autodiff import trace as _trace

dict = builtins.dict  # noqa: A001 - autograd's containers are the builtins here
list = builtins.list  # noqa: A001
tuple = builtins.tuple  # noqa: A001
isinstance = builtins.isinstance  # noqa: A001
type = builtins.type  # noqa: A001


def _f64(x: Any) -> Any:
    """A differentiated argument as autograd sees it: float arrays keep their dtype, Python
    numbers and integers become float64."""
    if isinstance(x, _tg.Tensor):
        return x if x.dtype.kind == "f" else x.astype(_tg.float64)
    if isinstance(x, _np.ndarray) and x.dtype.kind == "f":
        return x
    if (
        isinstance(x, (builtins.list, builtins.tuple))
        and x
        and all(not isinstance(v, (builtins.list, builtins.tuple, builtins.dict)) for v in x)
    ):
        return _np.asarray(x, dtype=_np.float64)
    a = _np.asarray(x)
    if a.dtype.kind == "c":
        raise TypeError(
            "complex input: tapegrad's gradients are real-valued (complex is out of scope)"
        )
    return _np.asarray(a, dtype=_np.float64) if a.dtype.kind in "fiub" else x


def _nums(argnum: Any) -> builtins.tuple[int, ...]:
    return (argnum,) if isinstance(argnum, int) else builtins.tuple(argnum)


def _prep(args: Any, argnum: Any) -> builtins.list[Any]:
    out = builtins.list(args)
    for n in _nums(argnum):
        out[n] = _f64(out[n])
    return out


def _scalar(y: Any) -> Any:
    return y if isinstance(y, _tg.Tensor) else _tg.tensor(_np.asarray(y, dtype=_np.float64))


def value_and_grad(fun: Any, argnum: Any = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        f = lambda *a: _scalar(fun(*a, **kwargs))  # noqa: E731
        return _tg.value_and_grad(f, argnums=argnum)(*_prep(args, argnum))

    return run


def grad(fun: Any, argnum: Any = 0) -> Any:
    vg = value_and_grad(fun, argnum)
    return lambda *args, **kwargs: vg(*args, **kwargs)[1]


deriv = grad


def _vjp(fun: Any, args: Any, kwargs: Any, argnum: int, v: Any) -> Any:
    args = _prep(args, argnum)
    with _tg.Tape(watch_parameters=False) as tape:
        x = _trace(
            _tg.tensor(args[argnum]) if not isinstance(args[argnum], _tg.Tensor) else args[argnum],
            tape,
        )
        args[argnum] = x
        y = _scalar(fun(*args, **kwargs))
    if tape not in y._tapes:
        tape.release()
        return _tg.zeros_like(x), y
    return tape.gradient(y, x, output_gradients=v(y)), y


def elementwise_grad(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        return _vjp(fun, args, kwargs, argnum, _tg.ones_like)[0]

    return run


def jacobian(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        args = _prep(args, argnum)
        y = _scalar(fun(*args, **kwargs))
        rows = []
        for i in range(int(_np.prod(y.shape))):
            e = _np.zeros(int(_np.prod(y.shape)))
            e[i] = 1.0

            def seed(yy: Any, e: Any = e) -> Any:
                return _tg.tensor(e.reshape(yy.shape).astype(yy.dtype))

            rows.append(_tg.reshape(_vjp(fun, args, kwargs, argnum, seed)[0], (-1,)))
        xshape = _np.shape(args[argnum])
        return _tg.reshape(_tg.stack(rows), builtins.tuple(y.shape) + builtins.tuple(xshape))

    return run


def hessian(fun: Any, argnum: int = 0) -> Any:
    return jacobian(jacobian(fun, argnum), argnum)


def grad_and_aux(fun: Any, argnum: Any = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        f = lambda *a: (_scalar(fun(*a, **kwargs)[0]), fun(*a, **kwargs)[1])  # noqa: E731
        g, aux = _tg.grad(f, argnums=argnum, has_aux=True)(*_prep(args, argnum))
        return g, aux

    return run


def checkpoint(fun: Any) -> Any:
    return fun  # recomputation changes memory, not values


def make_vjp(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        y = _scalar(fun(*_prep(args, argnum), **kwargs))

        def vjp(v: Any) -> Any:
            return _vjp(fun, args, kwargs, argnum, lambda yy: _tg.tensor(_f64(v)))[0]

        return vjp, y

    return run


def make_jvp(fun: Any, argnum: int = 0) -> Any:
    # tapegrad is reverse mode: J v from the Jacobian (the adapter's inputs are small)
    def run(*args: Any, **kwargs: Any) -> Any:
        jac = jacobian(fun, argnum)(*args, **kwargs)
        y = _scalar(fun(*_prep(args, argnum), **kwargs))

        def jvp(v: Any) -> Any:
            n = int(_np.prod(_np.shape(v)))
            flat = _tg.reshape(jac, (-1, n)) @ _tg.reshape(_tg.tensor(_f64(v)), (n,))
            return y, _tg.reshape(flat, builtins.tuple(y.shape))

        return jvp

    return run


def vector_jacobian_product(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        *a, v = args
        return _vjp(fun, a, kwargs, argnum, lambda yy: _tg.tensor(_f64(v)))[0]

    return run


def tensor_jacobian_product(fun: Any, argnum: int = 0) -> Any:
    # v may cover only the leading axes of the output: contract them with the Jacobian
    def run(*args: Any, **kwargs: Any) -> Any:
        *a, v = args
        jac = jacobian(fun, argnum)(*a, **kwargs)
        return _tg.tensordot(_tg.tensor(_f64(v)), jac, axes=_np.ndim(v))

    return run


def hessian_tensor_product(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        *a, v = args
        g = grad(fun, argnum)

        def gv(*b: Any) -> Any:
            return (g(*b, **kwargs) * _tg.tensor(_f64(v))).sum()

        return grad(gv, argnum)(*a)

    return run


hessian_vector_product = hessian_tensor_product


def make_hvp(fun: Any, argnum: int = 0) -> Any:
    def run(*args: Any) -> Any:
        return (lambda v: hessian_tensor_product(fun, argnum)(*args, v)), fun(*args)

    return run


def make_ggnvp(f: Any, g: Any = None, f_argnum: int = 0) -> Any:
    def run(*args: Any) -> Any:
        x = args[f_argnum]
        jf = jacobian(f, f_argnum)(*args)
        fx = f(*_prep(args, f_argnum))
        hg = hessian(g)(fx) if g is not None else None
        n, m = int(_np.prod(_np.shape(x))), int(_np.prod(jf.shape)) // int(_np.prod(_np.shape(x)))
        jm = _tg.reshape(jf, (m, n))
        hm = _tg.eye(m, dtype=_tg.float64) if hg is None else _tg.reshape(hg, (m, m))

        def ggnvp(v: Any) -> Any:
            out = jm.T @ (hm @ (jm @ _tg.reshape(_tg.tensor(_f64(v)), (n,))))
            return _tg.reshape(out, _np.shape(x))

        return ggnvp

    return run
