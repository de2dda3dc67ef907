"""The builder's op methods are discoverable: dir(net), help(net.FC), their signatures."""

import inspect
import pydoc

import pytest

import asyncnet as an
from asyncnet.core.registry import get_schema, registered_ops

pytestmark = pytest.mark.timeout(60)


def test_dir_lists_every_registered_op_and_the_builder_methods():
    names = dir(an.Net("n"))
    assert set(registered_ops()) <= set(names)
    assert {"add_op", "to_def", "to_json", "name"} <= set(names)
    assert names == sorted(names)


def test_op_method_doc_is_the_schema():
    net = an.Net("n")
    doc = net.FC.__doc__
    schema = get_schema("FC")
    assert schema.doc.splitlines()[0] in doc
    for line in list(schema.inputs_doc) + list(schema.outputs_doc):
        assert line in doc
    assert "arg axis: int (default 1)" in doc
    assert net.FC.__name__ == "FC" and net.FC.__qualname__ == "Net.FC"
    text = pydoc.render_doc(net.FC, renderer=pydoc.plaintext)
    assert "Fully connected" in text or schema.doc.splitlines()[0] in text
    assert "axis=1" in text


@pytest.mark.parametrize("op_type", sorted(registered_ops()))
def test_signature_lists_the_args_with_defaults(op_type):
    schema = get_schema(op_type)
    sig = inspect.signature(getattr(an.Net("n"), op_type))
    assert list(sig.parameters)[:2] == ["inputs", "outputs"]
    for arg in schema.args.values():
        p = sig.parameters[arg.name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY
        assert p.default is (inspect.Parameter.empty if arg.required else arg.default) or p.default == arg.default


def test_the_documented_method_still_builds_ops():
    net = an.Net("n")
    h = net.FC(["x", "w", "b"], "h", axis=1)
    assert h == "h" and net.ops[0].type == "FC" and net.ops[0].args == {"axis": 1}
    with pytest.raises(an.NetDefinitionError, match="Did you mean 'FC'"):
        _ = net.FCC
