"""Optimizers over ``model.parameters()`` with ``step(grads)``; numerics equal to torch.optim."""
