"""Write the API reference pages (docs/api/*.md): one entry per public name of each namespace.

Run it after adding a public name (`python docs/gen_api.py`); the test suite checks that the
committed pages match what it writes, and builds the site with warnings as errors.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import tapegrad as tg

PAGES = {
    "tapegrad": ("tapegrad", "Tensors, creation, ops, the tape, gradients, checkpoints."),
    "nn": ("tapegrad.nn", "Layers, containers and the Module base class."),
    "functional": ("tapegrad.nn.functional", "The functional forms of the layers and losses."),
    "init": ("tapegrad.nn.init", "Parameter initialisation, as torch.nn.init."),
    "utils": ("tapegrad.nn.utils", "Helpers on gradients, as torch.nn.utils."),
    "optim": ("tapegrad.optim", "Optimizers and learning-rate schedules."),
    "data": ("tapegrad.data", "Datasets and the DataLoader."),
    "testing": ("tapegrad.testing", "The gradient checker."),
    "distributed": ("tapegrad.distributed", "Data-parallel training on several processes (MPI)."),
    "linalg": ("tapegrad.linalg", "numpy.linalg with gradients, and the matrix products."),
    "amp": ("tapegrad.amp", "Mixed precision: autocast and the gradient scaler."),
}
SKIP = {"annotations"}


def public_names(modname: str) -> list[str]:
    """The names a page documents: ``__all__`` where the module has one, else every public
    function and class it defines or re-exports from tapegrad (not submodules, not aliases of
    numpy dtypes)."""
    mod = sys.modules[modname]
    names = getattr(mod, "__all__", None)
    if names is None:
        names = []
        for n in sorted(vars(mod)):
            v = getattr(mod, n)
            if n.startswith("_") or n in SKIP or inspect.ismodule(v):
                continue
            if (inspect.isfunction(v) or inspect.isclass(v)) and (
                getattr(v, "__module__", "") or ""
            ).startswith("tapegrad"):
                names.append(n)
    out = []
    for n in names:
        v = getattr(mod, n)
        if inspect.ismodule(v):
            continue  # a submodule has its own page
        out.append(n)
    return sorted(set(out), key=lambda n: (n.lower(), n))


def page(key: str) -> str:
    modname, blurb = PAGES[key]
    lines = [f"# `{modname}`", "", blurb, ""]
    for n in public_names(modname):
        lines += [f"::: {modname}.{n}", ""]
    return "\n".join(lines)


def main() -> None:
    out = Path(__file__).parent / "api"
    out.mkdir(exist_ok=True)
    for key in PAGES:
        (out / f"{key}.md").write_text(page(key))


if __name__ == "__main__":
    assert tg  # imported for its side effects: every namespace is loaded
    main()
