"""The autodiff engine: primitives, recording, the reverse walk, Gradients and the Tape.

One concept per module, imports running downward, nothing imported from nn, optim or ops; the
layout and the hooks are drawn in docs/design.md ("Layers").
"""

from ._apply import apply
from ._gradients import Gradients, MissingGradientError
from ._namespace import ARRAYS, set_tensor_namespace
from ._primitive import OUT, PRIMITIVES, Joint, Primitive, defprim, nondiff, undefprim
from ._record import Node
from ._state import (
    current_scope,
    is_capturing,
    is_grad_enabled,
    is_recomputing,
    is_recording,
    isolated,
    no_grad,
    recomputation,
    scope_list,
    set_anomaly_mode,
    set_op_hooks,
    start_capture,
    stop_capture,
)
from ._tape import Tape, backward, stop_gradient, trace
