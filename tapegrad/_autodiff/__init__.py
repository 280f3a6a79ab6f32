"""The autodiff engine: primitives, recording, the reverse walk, Gradients and the Tape.

Modules, each one concept, imports running downward:

- ``_state``: the trace state (open tapes, grad switch, module scope, compile capture);
- ``_primitive``: ``Primitive``, ``defprim``, ``nondiff``, ``Joint``, ``OUT``;
- ``_namespace``: the ``xp`` a VJP is written against (numpy, or tapegrad's ops);
- ``_record``: the layout of one recorded op, ``Node``, the saved-input version checks;
- ``_apply``: ``apply``, the one door every op goes through, and recording;
- ``_engine``: the reverse walk (undo broadcasting, cast, accumulate; compile's capture hook);
- ``_gradients``: ``Gradients`` and the reasons a gradient is missing;
- ``_request``: a gradient call's targets, sources and the shape of its result;
- ``_tape``: ``Tape``, ``backward``, ``trace``, ``stop_gradient``.

Nothing here imports nn, optim or ops: a Module is recognised by its ``_parameter_list()``
method, and the ops package installs the Tensor namespace (``set_tensor_namespace``).
"""

from ._apply import apply
from ._engine import ArrayOp
from ._gradients import Gradients, MissingGradientError
from ._namespace import ARRAYS, set_tensor_namespace
from ._primitive import OUT, PRIMITIVES, Joint, Primitive, defprim, nondiff, undefprim
from ._record import Node
from ._state import (
    current_scope,
    is_capturing,
    is_grad_enabled,
    is_recording,
    isolated,
    no_grad,
    pop_scope,
    push_scope,
    set_anomaly_mode,
    set_op_hooks,
    start_capture,
    stop_capture,
)
from ._tape import Tape, backward, stop_gradient, trace
