"""tapegrad: deep learning with a gradient tape you can hold, inspect and release.

>>> import tapegrad as tg
>>> w = tg.Parameter(tg.tensor([1.0, -2.0]))
>>> with tg.Tape() as tape:
...     loss = (w * w).sum()
>>> tape.gradient(loss)[w].tolist()
[2.0, -4.0]
"""

from typing import Any

from . import (
    _array_cache,
    _dtypes,
    _inspect,  # noqa: F401  (binds Tape.summary, to_dot, render, explain)
    _malloc,
    _methods,  # noqa: F401  (binds Tensor's operators)
    _numpy_api,  # noqa: F401  (numpy functions on Tensors run tapegrad's ops)
    amp,
    data,
    distributed,
    linalg,
    nn,
    optim,
    testing,
)
from ._amp import autocast
from ._anomaly import AnomalyError, detect_anomaly
from ._array_cache import empty_cache, memory_stats
from ._autodiff import (
    Gradients,
    MissingGradientError,
    Tape,
    apply,
    backward,
    defprim,
    is_grad_enabled,
    no_grad,
    stop_gradient,
    trace,
    undefprim,
)
from ._checkpoint import checkpoint, checkpoint_module
from ._compile import CompiledStep, compile
from ._creation import (
    Generator,
    arange,
    bernoulli,
    default_generator,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    multinomial,
    normal,
    ones,
    ones_like,
    permutation,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    uniform,
    zeros,
    zeros_like,
)
from ._dtypes import (
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    set_default_dtype,
    uint8,
)
from ._functional import grad, value_and_grad
from ._io import load, load_checkpoint, save, save_checkpoint
from ._tensor import Parameter, Tensor, is_tensor
from ._threads import get_num_threads, set_num_threads
from ._version import __version__
from .ops import *  # noqa: F403
from .ops import abs, all, any, max, min, pow, round, sum  # noqa: F401

_malloc.tune()  # keep freed array memory for reuse (see _malloc.py; TAPEGRAD_TUNE_MALLOC=0)
_array_cache.install()  # large array blocks reused at the same size (see _array_cache/)

detach = stop_gradient
bool = bool_  # noqa: A001  (tg.bool, as torch.bool)
float, double, long = float32, float64, int64  # noqa: A001  (PyTorch's dtype names)
int = int32  # noqa: A001


def __getattr__(name: str) -> Any:
    if name == "bfloat16":  # lazily: `import tapegrad` does not import ml_dtypes
        return _dtypes.bfloat16_dtype()
    raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")
