"""Checkpoint integrity: every damaged byte caught, crafted metadata refused, saves that never
tear, a full disk named."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import safetensors.torch

import tapegrad as tg
from tapegrad import _io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))


def _child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def _small_checkpoint(path):
    model = tg.nn.Linear(3, 2)
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    tg.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "step": 7,
            "config": {"lr": 0.001, "name": "run"},
        },
        path,
    )


def _flips_undetected(path, bits, tmp_path):
    """The bit positions whose flip loads without error (each flip alone)."""
    data = path.read_bytes()
    bad = tmp_path / "flipped.safetensors"
    missed = []
    for i in bits:
        b = bytearray(data)
        b[i // 8] ^= 1 << (i % 8)
        bad.write_bytes(bytes(b))
        try:
            tg.load(bad)
        except ValueError as e:
            assert "flipped.safetensors" in str(e)  # the error names the file
            assert "corrupt" in str(e) or "not a readable safetensors file" in str(e), str(e)
        else:
            missed.append(i)
    return missed


def test_every_single_bit_flip_of_a_small_checkpoint_is_caught(tmp_path):
    path = tmp_path / "small.safetensors"
    _small_checkpoint(path)
    n = path.stat().st_size
    assert 500 < n < 1000  # small enough to try every bit (about 5,000 loads)
    assert _flips_undetected(path, range(n * 8), tmp_path) == []


@pytest.mark.slow
def test_a_sample_of_bit_flips_of_a_training_checkpoint_is_caught(tmp_path):
    model = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.ReLU(), tg.nn.Linear(8, 2))
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    sched = tg.optim.lr_scheduler.StepLR(opt, step_size=3)
    path = tmp_path / "run.safetensors"
    tg.save_checkpoint(path, model, opt, sched, step=12, config={"lr": 1e-3})
    n = path.stat().st_size
    bits = random.Random(0).sample(range(n * 8), 2000)  # header (RNG states) and data alike
    assert _flips_undetected(path, bits, tmp_path) == []


def test_the_header_and_the_checksum_are_covered(tmp_path):
    path = tmp_path / "c.safetensors"
    tg.save({"lr": 0.001, "w": tg.ones(2)}, path)
    data = path.read_bytes()
    i = data.index(b"0.001")
    bad = data[: i + 4] + b"3" + data[i + 5 :]  # lr 0.001 -> 0.003
    path.write_bytes(bad)
    with pytest.raises(
        ValueError, match=r"'.*c\.safetensors' is corrupt: the file fails its checksum"
    ):
        tg.load(path)
    at = data.index(b'"tapegrad_crc32":"') + len(b'"tapegrad_crc32":"')
    upper = data[:at] + data[at : at + 8].upper() + data[at + 8 :]
    if upper != data:  # the same number in capitals is still a changed file
        path.write_bytes(upper)
        with pytest.raises(ValueError, match="corrupt"):
            tg.load(path)


def test_files_stay_readable_by_safetensors_and_pytorch(tmp_path):
    lin = tg.nn.Linear(3, 2)
    path = tmp_path / "sd.safetensors"
    tg.save(lin.state_dict(), path)
    sd = safetensors.torch.load_file(str(path))
    np.testing.assert_array_equal(sd["weight"].numpy(), lin.weight.numpy())
    ref = __import__("torch").nn.Linear(3, 2)
    ref.load_state_dict(sd)
    meta = json.loads(_io_meta(path)["tapegrad"])
    assert meta["version"] == 2


def _io_meta(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        return f.metadata()


def test_version_1_files_still_load(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "v1.safetensors"
    w = np.arange(3, dtype=np.float32)
    meta = {"version": 1, "tree": {"w": {"__tensor__": "w"}, "step": 2}, "crc32": {}}
    save_file({"w": w}, str(path), metadata={"tapegrad": json.dumps(meta)})
    back = tg.load(path)
    assert back["step"] == 2 and back["w"].tolist() == [0.0, 1.0, 2.0]


# -- crafted metadata (a valid checksum over malformed content) ---------------------------------


def _crafted(path, meta_text, arrays=None):
    head, chunks = _io._layout(arrays or {}, meta_text)
    with open(path, "wb") as f:
        f.write(head)
        for c in chunks:
            f.write(c)


_DEEP = "[" * 2000 + "]" * 2000
_CRAFTED = {
    "not json": "{not json",
    "a list": "[1, 2]",
    "version a string": '{"version": "2", "tree": 1, "crc32": {}}',
    "crc32 a list": '{"version": 2, "tree": 1, "crc32": []}',
    "no tree": '{"version": 2, "crc32": {}}',
    "tensor key a list": '{"version": 2, "tree": {"__tensor__": [1]}, "crc32": {}}',
    "missing tensor": '{"version": 2, "tree": {"__tensor__": "w"}, "crc32": {}}',
    "dict items an int": '{"version": 2, "tree": {"__dict__": 5}, "crc32": {}}',
    "dict key a dict": '{"version": 2, "tree": {"__dict__": [[{"a": 1}, 2]]}, "crc32": {}}',
    "tuple of an int": '{"version": 2, "tree": {"__tuple__": 3}, "crc32": {}}',
    "nested 2000 deep": '{"version": 2, "tree": ' + _DEEP + ', "crc32": {}}',
    "nested dicts 2000 deep": '{"version": 2, "tree": '
    + '{"a": ' * 2000
    + "1"
    + "}" * 2000
    + ', "crc32": {}}',
    "an absurd number": '{"version": 2, "tree": ' + "9" * 5000 + ', "crc32": {}}',
    "crc of the wrong type": '{"version": 2, "tree": 1, "crc32": {"w": "x"}}',
}


@pytest.mark.parametrize("case", sorted(_CRAFTED))
def test_crafted_metadata_is_a_corrupt_checkpoint(tmp_path, case):
    path = tmp_path / "crafted.safetensors"
    arrays = {"w": np.ones(2, np.float32)} if "wrong type" in case else None
    _crafted(path, _CRAFTED[case], arrays)
    with pytest.raises(ValueError, match=r"tg\.load: '.*crafted\.safetensors' is corrupt"):
        tg.load(path)


def test_absurd_sizes_in_the_safetensors_header_are_refused(tmp_path):
    path = tmp_path / "huge.safetensors"
    header = b'{"w":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,4]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\x00" * 4)
    with pytest.raises(ValueError, match=r"'.*huge\.safetensors' is not a readable safetensors"):
        tg.load(path)
    path.write_bytes((2**62).to_bytes(8, "little") + b"{}")
    with pytest.raises(ValueError, match=r"'.*huge\.safetensors' is not a readable safetensors"):
        tg.load(path)


def _checkpoint_with(path, **entries):
    model = tg.nn.Linear(2, 1)
    opt = tg.optim.Adam(model.parameters())
    sched = tg.optim.lr_scheduler.StepLR(opt, step_size=2)
    ck = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "step": 1,
        "rng": _io.rng_state(),
        "config": None,
    }
    ck.update(entries)
    tg.save(ck, path)
    return model, opt, sched


@pytest.mark.parametrize(
    "entries",
    [
        {"model": "weights"},
        {"model": {"weight": "abc", "bias": [0.0]}},
        {"optimizer": {"state": [], "param_groups": []}},
        {"optimizer": {"state": {}, "param_groups": [{"lr": "fast", "params": [0, 1]}]}},
        {"scheduler": {"last_epoch": "3"}},
        {"scheduler": {"optimizer": {"lr": 1.0}}},
        {"rng": {"python": 5}},
        {"rng": {"numpy": [1, 2]}},
        {"rng": {"tapegrad": "seed"}},
    ],
    ids=lambda e: "-".join(f"{k}={str(v)[:20]}" for k, v in e.items()),
)
def test_load_checkpoint_with_state_of_the_wrong_type_names_the_file(tmp_path, entries):
    path = tmp_path / "ck.safetensors"
    model, opt, sched = _checkpoint_with(path, **entries)
    with pytest.raises((ValueError, RuntimeError), match=r"load_checkpoint: '.*ck\.safetensors'"):
        tg.load_checkpoint(path, model, opt, sched)


# -- a full disk ---------------------------------------------------------------------------------

_FULL_DISK = textwrap.dedent(
    """
    import os, resource, signal, sys
    import numpy as np
    import tapegrad as tg

    path = sys.argv[1]
    tg.save({"w": tg.ones(3), "version": 1}, path)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
    try:
        tg.save({"w": tg.tensor(np.ones(1_000_000, np.float32)), "version": 2}, path)
    except OSError as e:
        print("OSError", e.errno, e)
    print(sorted(os.listdir(os.path.dirname(path))))
    back = tg.load(path)
    print("old", back["version"], back["w"].tolist())
    """
)


def test_a_full_disk_raises_oserror_naming_the_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "ck.safetensors"
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith("OSError 27 ")  # EFBIG, as ENOSPC would be
    assert "tg.save: could not write '" + str(path) + "'" in out[0]
    assert out[1] == "['ck.safetensors']"  # the temporary file is gone
    assert out[2] == "old 1 [1.0, 1.0, 1.0]"


# -- SIGKILL during saves ------------------------------------------------------------------------

_KILLS = textwrap.dedent(
    """
    import os, random, signal, sys, time
    import numpy as np
    import tapegrad as tg

    path, trials = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(0)
    tg.save({"i": -1, "w": tg.tensor(np.full(300_000, -1.0, np.float32))}, path)
    seen = set()
    for t in range(trials):
        pid = os.fork()
        if pid == 0:  # saves, one after the other, until killed
            i = t * 1000
            while True:
                tg.save({"i": i, "w": tg.tensor(np.full(300_000, float(i), np.float32))}, path)
                i += 1
        time.sleep(rnd.uniform(0.0, 0.05))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        back = tg.load(path)  # never torn: the last complete save, whole
        w = back["w"].numpy()
        assert w.shape == (300_000,) and (w == back["i"]).all(), back["i"]
        seen.add(back["i"])
        for f in os.listdir(os.path.dirname(path)):  # a killed save may leave its temporary
            if f.endswith(".tmp"):
                os.unlink(os.path.join(os.path.dirname(path), f))
    print("ok", len(seen))
    """
)


def test_sigkill_at_random_points_of_many_saves_never_tears_the_file(tmp_path):
    path = tmp_path / "ck.safetensors"
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _KILLS, str(path), "60"],
        check=False,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    status, distinct = out.stdout.split()
    assert status == "ok"
    assert int(distinct) >= 2  # the kills did land between different saves
