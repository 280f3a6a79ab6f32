"""What ``Module.load_state_dict`` checks and says: the values it accepts, the keys it did not
match, and the copies ``deepcopy`` makes of a module's tensors."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _backend as B
from .._backend import np
from .._tensor import Parameter, Tensor, _wrap


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` returns: the keys it did not find and the keys it did not use."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def fresh_copy(t: Tensor) -> Tensor:
    if isinstance(t, Parameter):
        p = Parameter(t._data.copy(), requires_grad=t.requires_grad)
        p.name = t.name
        return p
    return _wrap(t._data.copy())


def as_numbers(owner: str, key: str, v: Any) -> Any:
    """A state-dict value as an array of numbers, or a TypeError naming the key."""
    if isinstance(v, Tensor):
        return v._data
    if B.is_array(v):
        a = v
    else:
        try:
            a = np.asarray(v)
        except (ValueError, TypeError):  # ragged lists
            a = None
    if a is None or a.dtype.kind not in "biuf":
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
        raise TypeError(
            f"load_state_dict: {owner}: '{key}' is a {type(v).__name__} ({shown}), not an array "
            "of numbers; pass tensors, numpy arrays or (nested) lists of numbers"
        )
    return a


def keys_message(owner: str, missing: list[str], unexpected: list[str]) -> str:
    msg = f"load_state_dict: {owner}: "
    parts = []
    if missing:
        parts.append(f"missing keys {missing}")
    if unexpected:
        parts.append(f"unexpected keys {unexpected}")
    msg += "; ".join(parts)
    # A common cause: the checkpoint was saved from a wrapper (``module.``, ``model.``).
    hint = ""
    if missing and unexpected:
        for u in unexpected:
            for m in missing:
                if u.endswith("." + m):
                    pre = u[: -len(m)]
                    hint = (
                        f". The checkpoint's keys carry the prefix '{pre}': strip it with "
                        f"{{k.removeprefix('{pre}'): v for k, v in state.items()}}"
                    )
                    break
            if hint:
                break
    return msg + (hint or ". Pass strict=False to load only the keys that match")
