"""Parameter initialisation (in place, PyTorch's names)."""
