"""Checkpoints: ``tg.save`` / ``tg.load`` (safetensors for tensors, JSON metadata for the rest).

The file is a plain safetensors file, readable by ``safetensors.torch.load_file`` and every
other safetensors reader. Tensors are stored under keys made of their path in the saved object
joined by ``/`` (a flat ``state_dict`` keeps its own keys, so it loads into PyTorch as is;
``{"model": sd}`` stores ``model/encoder.weight``). Everything else (nested dicts, lists,
tuples, numbers, strings, bools, None) goes, as JSON, into the header's ``__metadata__`` under
``"tapegrad"``, together with a CRC32 of every tensor, and a CRC32 of the whole file (header and data) under
``"tapegrad_crc32"``, so that any damage to the file, metadata included, is caught on load.
Nothing is ever pickled or unpickled: a file holds data, never code. Metadata that passes the
checksum but is malformed (crafted by hand) gives the same corrupt-checkpoint ``ValueError``.

Writes are atomic: the file is written under a temporary name in the same directory, flushed
and fsynced, then renamed over the target (and the directory fsynced), so a crash or a killed
process leaves either the old file or the new one, never a torn one.

A training checkpoint is a dict ``{"model", "optimizer", "scheduler", "step", "rng",
"config"}`` (``save_checkpoint`` / ``load_checkpoint`` build and apply it).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import struct
import zlib
from typing import Any

from . import _backend as B
from ._backend import np
from ._creation import default_generator
from ._tensor import Tensor, _wrap

__all__ = ["load", "load_checkpoint", "save", "save_checkpoint"]

_FORMAT_VERSION = 2  # 2: a CRC32 of the whole file in the header (1: per tensor only)
_META_KEY = "tapegrad"
_CRC_KEY = "tapegrad_crc32"
# where the file's CRC sits in the header; it is computed with eight zeros in its place
_CRC_AT = b'"' + _CRC_KEY.encode() + b'":"'
_CRC_BLANK = "00000000"
_ST_DTYPES = {
    "b1": "BOOL", "u1": "U8", "i1": "I8", "u2": "U16", "i2": "I16", "u4": "U32", "i4": "I32",
    "u8": "U64", "i8": "I64", "f2": "F16", "f4": "F32", "f8": "F64",
}  # fmt: skip
# header markers; plain JSON dicts whose keys start with "__" are escaped as "__dict__"
_T, _A, _TUP, _DICT = "__tensor__", "__array__", "__tuple__", "__dict__"


# --------------------------------------------------------------------------------------------
# encoding: object tree -> (JSON tree, {key: array})
# --------------------------------------------------------------------------------------------


class _Encoder:
    def __init__(self) -> None:
        self.arrays: dict[str, Any] = {}
        self.crcs: dict[str, int] = {}

    def key(self, path: tuple[str, ...]) -> str:
        base = "/".join(path) if path else "tensor"
        k, n = base, 1
        while k in self.arrays or k == "__metadata__":  # two paths joining to one string
            k, n = f"{base}#{n}", n + 1
        return k

    def put(self, path: tuple[str, ...], arr: Any, marker: str) -> dict[str, str]:
        arr = np.asarray(B.to_device(arr, "cpu"), order="C")  # (ascontiguousarray makes 0-d 1-d)
        if _st_dtype(arr) is None or arr.dtype.byteorder == ">":
            arr = _storable(arr, path)
        k = self.key(path)
        self.arrays[k] = arr
        self.crcs[k] = zlib.crc32(arr.reshape(-1).view(np.uint8)) if arr.size else 0
        return {marker: k}

    def encode(self, obj: Any, path: tuple[str, ...]) -> Any:
        if isinstance(obj, Tensor):
            return self.put(path, obj._data, _T)
        if B.is_array(obj):
            return self.put(path, obj, _A)
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, (int, float)):
            return obj
        if isinstance(obj, np.generic):
            if obj.dtype.kind in "biuf":
                return obj.item()
            raise TypeError(_cannot(obj, path))
        if isinstance(obj, tuple):
            return {_TUP: [self.encode(v, (*path, str(i))) for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, (*path, str(i))) for i, v in enumerate(obj)]
        if isinstance(obj, dict):
            plain = all(isinstance(k, str) and not k.startswith("__") for k in obj)
            if plain:
                return {k: self.encode(v, (*path, k)) for k, v in obj.items()}
            items = []
            for k, v in obj.items():
                if not (k is None or isinstance(k, (str, int, float, bool, tuple))):
                    raise TypeError(
                        f"tg.save: dict key {k!r} at '{'/'.join(path)}' is a "
                        f"{type(k).__name__}; keys must be str, int, float, bool, None or tuples"
                    )
                items.append([self.encode(k, (*path, "key")), self.encode(v, (*path, str(k)))])
            return {_DICT: items}
        raise TypeError(_cannot(obj, path))


def _st_dtype(arr: Any) -> str | None:
    return _ST_DTYPES.get(f"{arr.dtype.kind}{arr.dtype.itemsize}")


def _storable(arr: Any, path: tuple[str, ...]) -> Any:
    if _st_dtype(arr) is not None:  # big-endian: store little-endian
        return arr.astype(arr.dtype.newbyteorder("<"))
    raise TypeError(
        f"tg.save: the array at '{'/'.join(path)}' has dtype {arr.dtype}; safetensors stores "
        "bool, integer and float arrays (up to 64 bits) only: cast it with .astype(...)"
    )


def _cannot(obj: Any, path: tuple[str, ...]) -> str:
    where = "/".join(path) or "the top level"
    hint = ""
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        var = path[-1] if path and path[-1].isidentifier() else "obj"
        hint = f" Save its state instead: {var}.state_dict() (a {type(obj).__name__} is code, not data)."
    return (
        f"tg.save: cannot store a {type(obj).__name__} at '{where}'. A checkpoint holds tensors, "
        "numpy arrays and JSON data (dicts, lists, tuples, numbers, strings, bools, None); "
        f"nothing is pickled.{hint}"
    )


def _decode(node: Any, arrays: dict[str, Any], where: str) -> Any:
    """The object a JSON tree encodes; ``where`` is the entry's path, for the error when the
    tree does not have the shape ``_Encoder`` writes (metadata crafted by hand)."""
    if isinstance(node, list):
        return [_decode(v, arrays, f"{where}/{i}") for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((k, v),) = node.items()
        if k in (_T, _A):
            if not isinstance(v, str):
                raise _Corrupt(_malformed(where, k, v, "the key of a tensor (a string)"))
            arr = _take(arrays, v, where)
            return _wrap(arr) if k == _T else arr
        if k == _TUP:
            if not isinstance(v, list):
                raise _Corrupt(_malformed(where, k, v, "a list of the items"))
            return tuple(_decode(x, arrays, f"{where}/{i}") for i, x in enumerate(v))
        if k == _DICT:
            return _decode_pairs(v, arrays, where)
    return {k: _decode(v, arrays, f"{where}/{k}") for k, v in node.items()}


def _decode_pairs(pairs: Any, arrays: dict[str, Any], where: str) -> dict[Any, Any]:
    """A dict saved as ``[[key, value], ...]`` (keys that are not plain strings)."""
    if not isinstance(pairs, list):
        raise _Corrupt(_malformed(where, _DICT, pairs, "a list of [key, value] pairs"))
    out = {}
    for i, pair in enumerate(pairs):
        at = f"{where}/{i}"
        if not (isinstance(pair, list) and len(pair) == 2):
            raise _Corrupt(_malformed(at, _DICT, pair, "a [key, value] pair (a list of 2)"))
        key = _hashable(_decode(pair[0], arrays, f"{at}/key"))
        try:
            hash(key)
        except TypeError:
            raise _Corrupt(
                _malformed(at, _DICT, pair[0], "a key (a string, number, bool, null or list)")
            ) from None
        out[key] = _decode(pair[1], arrays, f"{at}/value")
    return out


def _malformed(where: str, marker: str, got: Any, want: str) -> str:
    text = json.dumps(got)
    text = text if len(text) <= 80 else text[:80] + "..."
    n = f" of length {len(got)}" if isinstance(got, (list, dict)) else ""
    return (
        f"its tapegrad metadata is malformed at '{where or '/'}': a {marker} entry needs {want}, "
        f"got {text} ({type(got).__name__}{n}); it was not written by tg.save"
    )


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, (list, tuple)) else k


def _take(arrays: dict[str, Any], key: str, where: str) -> Any:
    try:
        return arrays[key]
    except KeyError:
        raise _Corrupt(
            f"its metadata at '{where or '/'}' refers to tensor '{key}', which the file does not "
            "hold"
        ) from None


# --------------------------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------------------------


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` to ``path`` as a safetensors file, atomically.

    ``obj`` is a tensor, a numpy array, or nested dicts/lists/tuples of tensors, numpy arrays,
    numbers, strings, bools and None (e.g. ``model.state_dict()`` or a training checkpoint).
    ``tg.load`` returns the same structure (tensors as Tensors, numpy arrays as numpy arrays).

    >>> import os, tempfile, tapegrad as tg
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> tg.save({"w": tg.ones(2), "step": 3, "betas": (0.9, 0.999)}, path)
    >>> ck = tg.load(path)
    >>> ck["w"].tolist(), ck["step"], ck["betas"]
    ([1.0, 1.0], 3, (0.9, 0.999))
    """
    enc = _Encoder()
    tree = enc.encode(obj, ())
    meta = json.dumps(
        {"version": _FORMAT_VERSION, "tree": tree, "crc32": enc.crcs},
        separators=(",", ":"),
        allow_nan=True,
    )
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"tg.save: cannot write '{target}': the directory '{directory}' does not exist "
            "(create it first: os.makedirs(directory, exist_ok=True))"
        )
    head, chunks = _layout(enc.arrays, meta)
    tmp = os.path.join(
        directory, f".{os.path.basename(target)}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    )
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:  # a full disk, a quota, a read-only directory: name the file
        _remove(tmp)
        raise OSError(
            e.errno,
            f"tg.save: could not write '{target}' ({e.strerror or e}); the previous file, if "
            "any, is unchanged. Free space or choose another directory",
        ) from e
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(directory)


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def _layout(arrays: dict[str, Any], meta: str) -> tuple[bytes, list[Any]]:
    """The safetensors header (with the whole file's CRC32 in it) and the data chunks.

    Written here rather than by ``safetensors.numpy.save_file`` so that the header's bytes are
    known: the CRC covers the 8-byte length, the header (with the CRC's own eight characters
    as zeros) and the data, in file order.
    """
    entries: dict[str, Any] = {"__metadata__": {_META_KEY: meta, _CRC_KEY: _CRC_BLANK}}
    chunks, off = [], 0
    for k, a in arrays.items():
        entries[k] = {
            "dtype": _st_dtype(a),
            "shape": list(a.shape),
            "data_offsets": [off, off + a.nbytes],
        }
        off += a.nbytes
        if a.size:
            chunks.append(a.reshape(-1).view(np.uint8))
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data aligned to 8 bytes, as safetensors pads
    head = struct.pack("<Q", len(text)) + text
    crc = zlib.crc32(head)
    for c in chunks:
        crc = zlib.crc32(c, crc)
    at = head.index(_CRC_AT) + len(_CRC_AT)
    return head[:at] + f"{crc:08x}".encode() + head[at + 8 :], chunks


def _fsync_dir(directory: str) -> None:
    """Make the rename itself durable (POSIX; directories cannot be opened on Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sniff(path: str) -> str:
    """A hint about what a file that is not safetensors might be."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return ""
    if head.startswith(b"PK\x03\x04"):
        return (
            " It looks like a PyTorch torch.save file (a zip of pickles); tapegrad never unpickles. "
            "In PyTorch, convert it with safetensors.torch.save_file(torch.load(p), out)."
        )
    if head[:1] == b"\x80":
        return " It looks like a Python pickle; tapegrad never unpickles."
    if len(head) < 8:
        return f" It is only {len(head)} bytes long."
    return ""


def _read_bf16(path: str, key: str) -> Any:
    """A bfloat16 tensor as float32 (bf16 is the top half of a float32's bits)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        info = json.loads(f.read(n))[key]
        start, end = info["data_offsets"]
        f.seek(8 + n + start)
        raw = np.frombuffer(f.read(end - start), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])


def load(path: str | os.PathLike[str]) -> Any:
    """Read a file written by ``tg.save`` (or any safetensors file).

    A tapegrad file gives back the saved structure; a foreign safetensors file (e.g. from
    ``safetensors.torch.save_file(model.state_dict(), path)``) gives a dict of Tensors
    (bfloat16 tensors, which numpy lacks, load as float32: exactly, it is a widening).
    A truncated, corrupt or non-safetensors file raises ``ValueError`` naming the file.
    """
    from safetensors import safe_open  # noqa: PLC0415

    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"tg.load: no such file: '{p}'")
    try:
        with safe_open(p, framework="numpy") as f:
            meta = f.metadata() or {}
            arrays = {}
            for k in f.keys():
                dt = f.get_slice(k).get_dtype()
                arrays[k] = _read_bf16(p, k) if dt == "BF16" else f.get_tensor(k)
    except Exception as e:
        raise ValueError(
            f"tg.load: '{p}' is not a readable safetensors file ({type(e).__name__}: {e}); it "
            f"may be truncated, corrupt or in another format.{_sniff(p)}"
        ) from None
    arrays = {k: (a if a.flags.writeable else a.copy()) for k, a in arrays.items()}
    raw, stored = meta.get(_META_KEY), meta.get(_CRC_KEY)
    if raw is None and stored is None:  # a foreign safetensors file: its tensors by name
        return {k: _wrap(a) for k, a in arrays.items()}
    try:
        header = _parse_header(raw)
        if stored is not None:
            _check_file_crc(p, stored, header, arrays)
        elif header["version"] >= 2:
            raise _Corrupt("its checksum entry is missing")
        if header["version"] > _FORMAT_VERSION:
            raise ValueError(
                f"tg.load: '{p}' was written in checkpoint format {header['version']}; this "
                f"tapegrad reads up to {_FORMAT_VERSION}. Upgrade tapegrad."
            )
        _check_tensor_crcs(header["crc32"], arrays)
        return _decode(header["tree"], arrays, "")
    except _Corrupt as e:
        raise ValueError(f"tg.load: '{p}' is corrupt: {e}") from None
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as e:
        # metadata that passed the checksum but does not have the shape tg.save writes
        raise ValueError(
            f"tg.load: '{p}' is corrupt: its tapegrad metadata is malformed "
            f"({type(e).__name__}: {_short(e)}); it was not written by tg.save"
        ) from None


class _Corrupt(Exception):
    """Why a file is corrupt (load adds the file's name)."""


def _short(e: BaseException) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:200] + "..."


def _parse_header(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, str):
        raise _Corrupt("its checksum entry is there but its tapegrad metadata is not")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _Corrupt(f"its tapegrad metadata does not parse ({_short(e)})") from None
    if not (
        isinstance(header, dict)
        and isinstance(header.get("version"), int)
        and isinstance(header.get("crc32"), dict)
        and "tree" in header
    ):
        raise _Corrupt("its tapegrad metadata lacks 'version', 'crc32' or 'tree'")
    return header


def _check_file_crc(p: str, stored: Any, header: dict[str, Any], arrays: dict[str, Any]) -> None:
    """The whole file against the CRC32 in its header (see ``_layout``)."""
    with open(p, "rb") as f:
        prefix = f.read(8)
        head = f.read(struct.unpack("<Q", prefix)[0])  # safetensors has checked the length
        at = head.find(_CRC_AT)
        if at < 0 or head.find(_CRC_AT, at + 1) >= 0:
            raise _Corrupt("its checksum entry cannot be found in the header")
        at += len(_CRC_AT)
        written = head[at : at + 8]
        crc = zlib.crc32(prefix)
        crc = zlib.crc32(head[:at] + _CRC_BLANK.encode() + head[at + 8 :], crc)
        while chunk := f.read(1 << 24):
            crc = zlib.crc32(chunk, crc)
    if written.decode("latin-1") == stored == f"{crc:08x}":
        return
    try:  # name the tensor when its data is what changed
        _check_tensor_crcs(header["crc32"], arrays)
    except _Corrupt:
        raise
    except Exception:  # noqa: BLE001, S110 - the header itself is what changed
        pass
    raise _Corrupt(
        f"the file fails its checksum (crc32 {crc:#010x}, header says {stored!r}): it changed "
        "after it was written (a damaged disk or copy?); use another copy"
    )


def _check_tensor_crcs(crcs: dict[str, Any], arrays: dict[str, Any]) -> None:
    for k, a in arrays.items():
        want = crcs.get(k)
        if want is not None and not isinstance(want, int):
            raise _Corrupt(f"the checksum of tensor '{k}' is a {type(want).__name__}")
        got = zlib.crc32(a.reshape(-1).view(np.uint8)) if a.size else 0
        if want is not None and want != got:
            raise _Corrupt(
                f"the data of tensor '{k}' fails its checksum (crc32 {got:#010x}, expected "
                f"{want:#010x})"
            )


# --------------------------------------------------------------------------------------------
# training checkpoints
# --------------------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """The state of every random stream a training run draws from (tapegrad, numpy, Python)."""
    return {
        "tapegrad": default_generator().get_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state()`` returned (after a save/load round trip too)."""
    if "tapegrad" in state:
        default_generator().set_state(state["tapegrad"])
    if "numpy" in state:
        s = state["numpy"]
        np.random.set_state(tuple(s) if isinstance(s, list) else s)
    if "python" in state:
        s = state["python"]
        random.setstate((s[0], tuple(s[1]), s[2]))


def _state_of(x: Any) -> Any:
    return x.state_dict() if hasattr(x, "state_dict") and callable(x.state_dict) else x


def save_checkpoint(
    path: str | os.PathLike[str],
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    step: int = 0,
    config: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """Save ``{"model", "optimizer", "scheduler", "step", "rng", "config", **extra}`` atomically.

    Objects with a ``state_dict()`` (model, optimizer, scheduler, and extras such as a
    DataLoader or a ModelEMA) are saved through it; ``rng`` holds the tapegrad, numpy and
    Python random states. Returns the dict that was saved.

    >>> import os, tempfile, tapegrad as tg
    >>> class M(tg.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tg.Parameter(tg.ones(2))
    >>> model = M(); opt = tg.optim.Adam(model.parameters())
    >>> path = os.path.join(tempfile.mkdtemp(), "run.safetensors")
    >>> _ = tg.save_checkpoint(path, model, opt, step=10, config={"lr": 1e-3})
    >>> tg.load_checkpoint(path, model, opt)["step"]
    10
    """
    ck: dict[str, Any] = {
        "model": _state_of(model),
        "optimizer": None if optimizer is None else _state_of(optimizer),
        "scheduler": None if scheduler is None else _state_of(scheduler),
        "step": step,
        "rng": rng_state(),
        "config": config,
    }
    for k, v in extra.items():
        ck[k] = _state_of(v)
    save(ck, path)
    return ck


def load_checkpoint(
    path: str | os.PathLike[str],
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    restore_rng: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """Load a checkpoint, restore it into the objects given, and return the dict.

    Each object given (model, optimizer, scheduler, and extras by their key, such as
    ``loader=train_loader``) gets ``load_state_dict`` of its entry; with ``restore_rng`` the
    random streams continue where the saved run was.
    """
    ck = load(path)
    if not isinstance(ck, dict) or "model" not in ck:
        raise ValueError(
            f"load_checkpoint: '{os.fspath(path)}' is not a training checkpoint (no 'model' entry); "
            "read it with tg.load"
        )
    targets = {"model": model, "optimizer": optimizer, "scheduler": scheduler, **extra}
    for key, obj in targets.items():
        if obj is None:
            continue
        if ck.get(key) is None:
            raise KeyError(f"load_checkpoint: '{os.fspath(path)}' holds no '{key}' state")
        _restore(path, key, lambda: obj.load_state_dict(ck[key]))
    if restore_rng and ck.get("rng") is not None:
        _restore(path, "rng", lambda: set_rng_state(ck["rng"]))
    return ck


def _restore(path: Any, key: str, fn: Any) -> None:
    """Run one ``load_state_dict``; state of the wrong shape or type is a corrupt checkpoint."""
    try:
        fn()
    except (ValueError, RuntimeError) as e:  # already says what does not fit: add the file
        cls = ValueError if isinstance(e, ValueError) else RuntimeError
        raise cls(f"load_checkpoint: '{os.fspath(path)}', entry '{key}': {e}") from None
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as e:
        raise ValueError(
            f"load_checkpoint: '{os.fspath(path)}' is corrupt: its '{key}' entry does not fit "
            f"({type(e).__name__}: {_short(e)})"
        ) from None
