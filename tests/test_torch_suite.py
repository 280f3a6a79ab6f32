"""tinygrad's op tests, written against PyTorch, run with ``torch`` bound to tapegrad
(tools/torch_suite.py): at least 85% of the in-scope tests pass and none gives a wrong result.
Runs where a tinygrad checkout is found (``TINYGRAD_SRC``, or the fetched mirror); skips otherwise
(its tests are not vendored)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_CANDIDATES = [os.environ.get("TINYGRAD_SRC", ""), "/work/.mirror/tinygrad+tinygrad/repo"]
SRC = next((Path(p) for p in _CANDIDATES if p and Path(p).exists()), None)


def _suite():  # noqa: ANN202 - a module from tools/
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import torch_suite  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return torch_suite


@pytest.mark.skipif(SRC is None, reason="no tinygrad checkout (set TINYGRAD_SRC)")
def test_torch_op_suite_passes_85_percent_with_no_wrong_result() -> None:
    suite = _suite()
    rows, _ = suite.run(SRC)
    counts = suite.summary(rows)
    wrong = [f"{r['test']}: {r['reason']}" for r in rows if r["category"] == "wrong"]
    assert not wrong, f"wrong results: {wrong}"
    assert counts["in_scope"] >= 350, counts  # the file ran (not an import failure)
    failed = [f"{r['test']}: {r['reason'][:120]}" for r in rows if r["category"] == "failed"]
    assert counts["passed"] >= 0.85 * counts["in_scope"], (counts, failed)


SAMPLE = '''
import unittest
import numpy as np
import torch
from tinygrad import Tensor, Device, dtypes

def helper_test_op(*args, **kwargs): raise AssertionError("replaced by the adapter")

class TestOps(unittest.TestCase):
  def helper_test_exception(self, *args, **kwargs): raise AssertionError("replaced")
  def test_same(self): helper_test_op([(3, 4)], lambda x: x.relu() * 2)
  def test_differs(self): helper_test_op([(3, 4)], lambda x: x * (2 if torch is _torch else 3))
  def test_wrong_grad(self): helper_test_op([(3,)], lambda x: x * 2 if torch is _torch else
                                            x * 3 - x.detach())
  def test_raises(self): helper_test_op([(3,)], lambda x: getattr(torch, "relu" if torch is _torch
                                                                  else "no_such_function")(x))
  def test_exception(self): self.helper_test_exception([(2, 3)], lambda x: x[5],
                                                       expected=IndexError)
  def test_tinygrad_only(self): Tensor.empty(3).realize()
  def test_uint32(self): helper_test_op([(3,)], lambda x: x.type(torch.uint32), forward_only=True)
  @unittest.skipIf(Device.DEFAULT == "CPU", "not on the CPU")
  def test_skipped(self): helper_test_op([(3,)], lambda x: x)
'''


def test_torch_suite_classifies_each_test(tmp_path: Path) -> None:
    import torch  # noqa: PLC0415

    import tapegrad  # noqa: PLC0415

    suite = _suite()
    ref = suite.load_module(SAMPLE, torch, "sample_torch")
    cand = suite.load_module(SAMPLE, tapegrad, "sample_tapegrad")
    ref["_torch"] = cand["_torch"] = torch
    allowed = suite._allowed_dtypes(torch, tapegrad)
    got = {
        name: suite.run_test(ref, cand, "TestOps", name, allowed)["category"]
        for name in ("test_same", "test_differs", "test_wrong_grad", "test_raises",
                     "test_exception", "test_tinygrad_only", "test_uint32", "test_skipped")
    }  # fmt: skip
    assert got == {
        "test_same": "passed", "test_differs": "wrong", "test_wrong_grad": "wrong",
        "test_raises": "failed", "test_exception": "passed", "test_tinygrad_only": "tinygrad_only",
        "test_uint32": "dtype", "test_skipped": "skipped",
    }  # fmt: skip
