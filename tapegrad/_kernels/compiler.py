"""The compiler process: ``python -m tapegrad._kernels.compiler`` compiles the kernels another
tapegrad process asks for into the shared on-disk cache, one request a line on stdin, and
answers ``<id> ok`` or ``<id> failed`` on stdout as each is done (``runtime`` starts it)."""

from __future__ import annotations

import base64
import importlib
import os
import pickle
import sys
from typing import Any

from .runtime import compile_lock


def _kernel(target: str) -> Any:
    """The dispatcher a request names (``module:name``, a module-level kernel)."""
    module, _, name = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def main() -> None:
    os.environ["TAPEGRAD_COMPILE"] = "wait"
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # the answers own stdout: nothing else may print there
    try:
        os.nice(5)  # the process that asked keeps the cores it trains on
    except OSError:
        pass
    for line in sys.stdin.buffer:
        rid, target, types = pickle.loads(base64.b64decode(line))
        try:
            kernel = _kernel(target)
            with compile_lock(kernel, types):  # another process may have it: load that
                if types not in kernel.overloads:  # declared signatures compiled on creation
                    kernel.compile(types)
            answer = "ok"
        except Exception as e:  # noqa: BLE001 - the asking process compiles it and raises
            answer = f"failed {type(e).__name__}"
        print(rid, answer, file=out)


if __name__ == "__main__":
    main()
