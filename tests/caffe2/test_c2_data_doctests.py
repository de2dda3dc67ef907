"""The docstring examples of the record, dataset and pipeline modules run as shown."""

import doctest
import importlib

import pytest

MODULES = [
    "caffe2.python.schema",
    "caffe2.python._np_aliases",
    "caffe2.python.dataset",
    "caffe2.python.dataio",
    "caffe2.python.queue_util",
    "caffe2.python.pipeline",
    "caffe2.python.net_printer",
    "caffe2.python.checkpoint",
    "asyncnet.ops.caffe2_dataset",
    "asyncnet.ops.caffe2_timer",
    "asyncnet.ops.caffe2_checkpoint",
    "asyncnet.ops.caffe2_textfile",
    "caffe2.python.text_file_reader",
]

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    from caffe2.python import workspace

    workspace.ResetWorkspace()
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
