"""Training: the model builder (:class:`MLP`), and the trainers built on it.

    >>> from asyncnet.train import MLP
    >>> MLP(input_dim=64, hidden=(32,), num_classes=10).params
    ['fc1_w', 'fc1_b', 'fc2_w', 'fc2_b']
"""

from asyncnet.train.model import MLP, CheckpointError

__all__ = ["MLP", "CheckpointError"]
