"""Functional forms of the layers and losses, with PyTorch's names and arguments."""
