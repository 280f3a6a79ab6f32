"""Checkpoints: tg.save / tg.load (safetensors for tensors, JSON metadata for the rest)."""


def save(obj, path):  # type: ignore[no-untyped-def]
    raise NotImplementedError("tg.save")


def load(path):  # type: ignore[no-untyped-def]
    raise NotImplementedError("tg.load")
