"""What a blob's tensor library and the machine need: the array namespace of a blob (numpy or
torch: :mod:`asyncnet.tensor.namespace`, where the kernel convention is written down), devices
and copies between them (:mod:`asyncnet.tensor.place`), and intra-op thread control
(:mod:`asyncnet.tensor.threads`). Nothing here imports torch until a torch tensor or a CUDA
device appears. (The kernels' ``namespace()`` function stays in its module, so that
``asyncnet.tensor.namespace`` names the module.)

    >>> import numpy as np
    >>> from asyncnet.tensor import library_of, to_numpy
    >>> library_of(np.ones(2)), to_numpy(np.ones(2))
    ('numpy', array([1., 1.]))
"""

from asyncnet.tensor.namespace import NUMPY, device_of, is_array, is_torch, library_of, to_numpy
from asyncnet.tensor.place import DeviceError, cuda_available, device_name, parse_device, place, require_device
from asyncnet.tensor.threads import ThreadClaim, claim_threads, intra_op_threads, process_cores, set_process_cores

__all__ = [
    "NUMPY",
    "library_of",
    "device_of",
    "is_array",
    "is_torch",
    "to_numpy",
    "DeviceError",
    "parse_device",
    "device_name",
    "place",
    "require_device",
    "cuda_available",
    "ThreadClaim",
    "claim_threads",
    "intra_op_threads",
    "process_cores",
    "set_process_cores",
]
