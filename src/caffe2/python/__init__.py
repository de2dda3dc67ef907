"""Caffe2's ``caffe2.python`` package on asyncnet: ``workspace``, ``core``, ``scope``, ``utils``,
``brew``, ``model_helper``, ``optimizer`` and the helpers Caffe2 scripts import.

    >>> import numpy as np
    >>> from caffe2.python import core, workspace
    >>> workspace.ResetWorkspace()
    True
    >>> _ = workspace.FeedBlob("x", np.array([-1.0, 2.0], np.float32))
    >>> net = core.Net("relu_doc")
    >>> _ = net.Relu("x", "y")
    >>> workspace.RunNetOnce(net)
    True
    >>> workspace.FetchBlob("y")
    array([0., 2.], dtype=float32)
"""
