"""The op set: primitives (forward beside VJP) and the compositions built on them."""

from ._elementwise import *  # noqa: F403
from ._elementwise import abs, pow, round  # noqa: F401
from ._linalg import einsum, matmul, outer, tensordot  # noqa: F401
from ._reduce import *  # noqa: F403
from ._reduce import all, any, max, min, sum  # noqa: F401
from ._shape import *  # noqa: F403
from ._softmax import log_softmax, softmax  # noqa: F401
