import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asyncnet as an
from asyncnet import DeviceOption, NetDef, NetDefinitionError, OperatorDef


def sample_def() -> NetDef:
    return NetDef(
        "n",
        ops=[
            OperatorDef("FC", ["x", "w", "b"], ["h"], {"axis": 1}, name="fc1", device_option=DeviceOption("cpu", 0, 0)),
            OperatorDef("Relu", ["h"], ["h"], control_inputs=["x"]),
            OperatorDef("ConstantFill", [], ["c"], {"shape": [2, 3], "value": 1.5, "dtype": "float32"}),
        ],
        type="async_scheduling",
        num_workers=2,
        external_inputs=["x", "w", "b"],
        external_outputs=["h"],
    )


def test_round_trip():
    nd = sample_def()
    assert NetDef.from_json(nd.to_json()) == nd
    assert NetDef.from_json(nd.to_json(indent=None).encode()) == nd


@pytest.mark.parametrize(
    "doc, path",
    [
        ("[]", "net"),
        ('{"ops": []}', "name"),
        ('{"name": "n", "ops": {}}', "ops"),
        ('{"name": "n", "ops": [{"inputs": []}]}', "ops[0]"),
        ('{"name": "n", "ops": [{"type": "Relu", "inputs": [1]}]}', "ops[0].inputs[0]"),
        ('{"name": "n", "ops": [{"type": "Relu", "args": {"a": {"b": 1}}}]}', "ops[0].args.a"),
        ('{"name": "n", "ops": [{"type": "Relu", "args": {"a": [[1]]}}]}', "ops[0].args.a"),
        (
            '{"name": "n", "ops": [{"type": "Relu", "device_option": {"device_type": "tpu"}}]}',
            "ops[0].device_option.device_type",
        ),
        ('{"name": "n", "type": "fast"}', "type"),
        ('{"name": "n", "num_workers": 0}', "num_workers"),
        ('{"name": "n", "num_workers": true}', "num_workers"),
        ('{"name": "n", "evil": 1}', "net"),
        ('{"name": "n", "ops": [{"type": "Relu", "args": {"x": NaN}}]}', None),
    ],
)
def test_bad_documents_name_the_field(doc, path):
    with pytest.raises(NetDefinitionError) as info:
        NetDef.from_json(doc)
    if path is not None:
        assert info.value.path == path, str(info.value)


def test_hostile_inputs():
    for doc in ["", "{", "\xff", b"\xff\xfe", "1" * 10, '{"name": "n"' + "]" * 5, "[" * 100000, "null"]:
        with pytest.raises(NetDefinitionError):
            NetDef.from_json(doc)
    with pytest.raises(NetDefinitionError):
        NetDef.from_json(12)  # type: ignore[arg-type]


def _mutate(obj, rng: random.Random):
    """Return a randomly damaged copy of a JSON value."""
    choices = [None, True, 0, -1, 1.5, "", "x", "Relu", [], {}, [1, [2]], {"type": None}, 2**70, "\u0000"]
    if isinstance(obj, dict) and obj and rng.random() < 0.7:
        obj = dict(obj)
        key = rng.choice(list(obj))
        r = rng.random()
        if r < 0.2:
            del obj[key]
        elif r < 0.3:
            obj[rng.choice(["extra", "args", "type", "ops", "inputs"])] = rng.choice(choices)
        else:
            obj[key] = _mutate(obj[key], rng)
        return obj
    if isinstance(obj, list) and obj and rng.random() < 0.7:
        obj = list(obj)
        i = rng.randrange(len(obj))
        r = rng.random()
        if r < 0.2:
            del obj[i]
        elif r < 0.35:
            obj.insert(i, rng.choice(choices))
        else:
            obj[i] = _mutate(obj[i], rng)
        return obj
    return rng.choice(choices)


@pytest.mark.timeout(120)
def test_fuzz_mutated_documents_only_raise_net_definition_error():
    """Thousands of damaged documents: loading and creating nets raises nothing but NetDefinitionError."""
    rng = random.Random(1234)
    base = json.loads(sample_def().to_json())
    ws = an.Workspace()
    outcomes = {"ok": 0, "error": 0}
    for _ in range(5000):
        doc = base
        for _ in range(rng.randint(1, 4)):
            doc = _mutate(doc, rng)
        text = json.dumps(doc)
        if rng.random() < 0.1:  # damage the text itself
            pos = rng.randrange(len(text) + 1)
            text = text[:pos] + rng.choice(["{", "]", '"', "\\", ",", "\x00", "1e999"]) + text[pos:]
        try:
            nd = NetDef.from_json(text)
            ws.instantiate(nd.__class__(**{**nd.__dict__, "type": "simple"})).close()
            outcomes["ok"] += 1
        except NetDefinitionError:
            outcomes["error"] += 1
    assert outcomes["error"] > 1000 and outcomes["ok"] > 10, outcomes


@given(st.text(max_size=200))
def test_arbitrary_text_only_raises_net_definition_error(text):
    try:
        NetDef.from_json(text)
    except NetDefinitionError:
        pass


def test_device_option_validation():
    with pytest.raises(NetDefinitionError):
        DeviceOption("gpu")
    with pytest.raises(NetDefinitionError):
        DeviceOption("cuda", -1)
    assert str(DeviceOption("cuda", 1)) == "cuda:1"
