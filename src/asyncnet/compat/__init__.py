"""Other systems' APIs on asyncnet: :mod:`asyncnet.compat.kizzasi` (kizzasi's data-parallel helpers)."""
