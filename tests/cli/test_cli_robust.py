"""No traceback from any input, signal or pipe: one line on stderr and a non-zero exit.

In-process cases call ``main(argv)``; pipes and signals need a real process.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncnet.cli import common
from asyncnet.cli.main import main

pytestmark = pytest.mark.timeout(120)

RELU_NET = {"name": "n", "ops": [{"type": "Relu", "inputs": ["x"], "outputs": ["y"]}]}


def npy_bytes(array):
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def run_main(argv, capsys):
    """main(argv) -> (status, stderr); argparse's SystemExit counts as a status."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().err


def assert_one_line_error(status, err):
    assert status != 0, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err


def _deep_json(depth):
    return "[" * depth + "1" + "]" * depth


BAD_FEEDS = {
    "empty.npy": b"",
    "garbage.npy": b"not an array at all",
    "truncated.npy": npy_bytes(np.arange(100.0))[:-9],
    "header_only.npy": npy_bytes(np.arange(100.0))[:80],
    "huge_shape.npy": None,  # a header that claims 8 TB
    "objects.npy": None,  # filled in below: a pickled object array
    "archive.npy": None,  # an .npz archive under a .npy name
    "empty.json": b"",
    "deep.json": _deep_json(100_000).encode(),
    "deeper_than_numpy.json": _deep_json(100).encode(),
    "strings.json": b'[1, "a"]',
    "ragged.json": b"[[1], [1, 2]]",
    "object.json": b'{"a": 1}',
    "null.json": b"null",
    "bigint.json": b"[" + b"9" * 40 + b"]",
    "latin1.json": b"[1, \xff]",
}


def _huge_header():
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    return buf.getvalue()


def _fill_bad_feeds():
    BAD_FEEDS["huge_shape.npy"] = _huge_header()
    buf = io.BytesIO()
    np.save(buf, np.array([None, {}]), allow_pickle=True)
    BAD_FEEDS["objects.npy"] = buf.getvalue()
    buf = io.BytesIO()
    np.savez(buf, x=np.ones(2))
    BAD_FEEDS["archive.npy"] = buf.getvalue()


_fill_bad_feeds()


@pytest.mark.parametrize("name", sorted(BAD_FEEDS))
def test_bad_feed_file_is_one_line(tmp_path, capsys, name):
    net = tmp_path / "net.json"
    net.write_text(json.dumps(RELU_NET))
    (tmp_path / name).write_bytes(BAD_FEEDS[name])
    status, err = run_main(["run", str(net), "--feed", f"x={tmp_path / name}", "--fetch", "y"], capsys)
    assert_one_line_error(status, err)
    assert f"cannot load array from {tmp_path / name}" in err


def test_feed_header_claiming_a_huge_array_allocates_nothing(tmp_path, capsys):
    path = tmp_path / "huge.npy"
    path.write_bytes(_huge_header())
    with pytest.raises(common.CLIError, match="shorter than the array its header describes"):
        common.load_array(str(path))


@pytest.mark.parametrize("path", ["/", "/no/such/file.npy", "/no/such/file.json"])
def test_feed_directory_or_missing_file(tmp_path, capsys, path):
    net = tmp_path / "net.json"
    net.write_text(json.dumps(RELU_NET))
    status, err = run_main(["run", str(net), "--feed", f"x={path}"], capsys)
    assert_one_line_error(status, err)


def test_json_feed_over_the_size_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common, "MAX_JSON_FEED_BYTES", 1000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(list(range(1000))))
    with pytest.raises(common.CLIError, match="over the 1000 byte limit; use a .npy file"):
        common.load_array(str(path))


def test_good_feeds_still_load(tmp_path):
    for i, array in enumerate(
        [np.arange(6.0).reshape(2, 3), np.float32(2.5), np.zeros((0, 3)), np.asfortranarray(np.arange(6).reshape(2, 3))]
    ):
        (tmp_path / f"{i}.npy").write_bytes(npy_bytes(array))
        loaded = common.load_array(str(tmp_path / f"{i}.npy"))
        assert type(loaded) is np.ndarray and loaded.dtype == array.dtype
        np.testing.assert_array_equal(loaded, array)
    (tmp_path / "a.json").write_text("[[1.5, 2], [3, 4]]")
    np.testing.assert_array_equal(common.load_array(str(tmp_path / "a.json")), [[1.5, 2], [3, 4]])


@pytest.mark.parametrize("save", ["/proc/forbidden.npz", "out", "/"])
def test_save_errors_are_one_line_and_write_exactly_the_path(tmp_path, capsys, monkeypatch, save):
    monkeypatch.chdir(tmp_path)
    net = tmp_path / "net.json"
    net.write_text(json.dumps(RELU_NET))
    (tmp_path / "x.npy").write_bytes(npy_bytes(np.ones(3)))
    status, err = run_main(["run", str(net), "--feed", "x=x.npy", "--fetch", "y", "--save", save], capsys)
    assert_one_line_error(status, err)
    assert sorted(os.listdir(tmp_path)) == ["net.json", "x.npy"]


def test_save_refuses_opaque_blobs(tmp_path, capsys):
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"name": "n", "ops": [{"type": "CreateMutex", "inputs": [], "outputs": ["m"]}]}))
    status, err = run_main(["run", str(net), "--fetch", "m", "--save", str(tmp_path / "o.npz")], capsys)
    assert_one_line_error(status, err)
    assert "blob 'm' holds a" in err


def test_unexpected_exception_is_one_line_internal_error(monkeypatch, capsys):
    from asyncnet.cli import ops_cmd

    def boom(args):
        raise ZeroDivisionError("a bug\nover two lines")

    monkeypatch.setattr(ops_cmd, "run", boom)
    status, err = run_main(["ops"], capsys)
    assert status == 70 and err.count("\n") == 1 and "Traceback" not in err
    assert "internal error: ZeroDivisionError: a bug over two lines" in err
    monkeypatch.setenv("ASYNCNET_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["ops"])


# --- fuzz: mutated arguments and file contents, in process --------------------------------

VALID_NET = json.dumps(
    {
        "name": "n",
        "type": "async_scheduling",
        "num_workers": 2,
        "ops": [
            {"type": "MatMul", "inputs": ["x", "x"], "outputs": ["h"]},
            {"type": "Relu", "inputs": ["h"], "outputs": ["h"]},
            {"type": "Sum", "inputs": ["h", "x"], "outputs": ["y"]},
        ],
    }
).encode()
VALID_NPY = npy_bytes(np.ones((3, 3), np.float32))


def _mutate(data: bytes, cuts: list[tuple[int, int, bytes]]) -> bytes:
    for pos, length, insert in cuts:
        pos = pos % (len(data) + 1)
        data = data[:pos] + insert + data[pos + length :]
    return data


mutations = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 8), st.binary(max_size=6)), max_size=4)
net_files = st.one_of(
    mutations.map(lambda m: _mutate(VALID_NET, m)),
    st.sampled_from([b"", b"null", _deep_json(5000).encode(), b'{"name": "n", "ops": 7}']),
    st.binary(max_size=64),
)
json_feeds = st.one_of(
    st.sampled_from(
        [
            b"",
            b"null",
            b"{}",
            b'[1, "a"]',
            b"[[1], [1, 2]]",
            b"[1e999]",
            b"[[1.0, 2.0], [3.0, 4.0]]",
            _deep_json(5000).encode(),
            _deep_json(70).encode(),
        ]
    ),
    mutations.map(lambda m: _mutate(b"[[1.0, 2.0, 0.5], [3.0, 4.0, -1], [0, 0, 1]]", m)),
)
npy_feeds = st.one_of(
    mutations.map(lambda m: _mutate(VALID_NPY, m)),
    st.sampled_from([b"", _huge_header(), BAD_FEEDS["objects.npy"], BAD_FEEDS["archive.npy"]]),
)
words = st.sampled_from(
    [
        "x",
        "y",
        "h",
        "nope",
        "",
        "=",
        "x=y",
        "x=f.npy",
        "x=f.json",
        "f.npy",
        "net.json",
        ".",
        "-1",
        "0",
        "2",
        "nan",
        "1e9999",
        "out.npz",
        "out.json",
        "out.dot",
        "/proc/x.npz",
        "--bogus",
    ]
)
flags = st.sampled_from(["--feed", "--fetch", "--iters", "--save", "-o", "--timeout", "--engine", "--help"])


def fuzz_case(argv, files, capsys, tmp_path_factory, monkeypatch):
    folder = tmp_path_factory.mktemp("fuzz")
    monkeypatch.chdir(folder)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    status, err = run_main(argv, capsys)
    assert status in (0, 1, 2), (argv, status, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    if status == 1:
        assert err.count("\n") == 1, (argv, err)
    if status == 2:  # argparse: its usage, then one error line
        assert err.splitlines()[-1].startswith("asyncnet"), (argv, err)


FUZZ = settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # mutated bytes make huge floats
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@FUZZ
@given(
    feed=st.one_of(npy_feeds.map(lambda c: ("f.npy", c)), json_feeds.map(lambda c: ("f.json", c))),
    command=st.sampled_from(["run", "trace"]),
)
def test_fuzz_feed_files(feed, command, capsys, tmp_path_factory, monkeypatch):
    name, content = feed
    out = ["--fetch", "y"] if command == "run" else ["-o", "t.json"]
    fuzz_case(
        [command, "net.json", "--feed", f"x={name}", *out],
        {"net.json": VALID_NET, name: content},
        capsys,
        tmp_path_factory,
        monkeypatch,
    )


@FUZZ
@given(net=net_files, command=st.sampled_from(["run", "trace", "graph"]))
def test_fuzz_net_files(net, command, capsys, tmp_path_factory, monkeypatch):
    argv = {
        "run": ["run", "net.json", "--feed", "x=f.npy", "--fetch", "y"],
        "trace": ["trace", "net.json", "--feed", "x=f.npy", "-o", "t.json"],
        "graph": ["graph", "net.json", "-o", "g.dot"],
    }[command]
    fuzz_case(argv, {"net.json": net, "f.npy": VALID_NPY}, capsys, tmp_path_factory, monkeypatch)


@FUZZ
@given(command=st.sampled_from(["run", "trace", "graph", "ops"]), rest=st.lists(st.one_of(flags, words), max_size=6))
def test_fuzz_arguments(command, rest, capsys, tmp_path_factory, monkeypatch):
    if command == "run" and "--iters" in rest:  # a huge --iters is a legitimately long run
        rest = [w if w not in ("1e9999",) else "2" for w in rest]
    fuzz_case(
        [command, *rest],
        {"net.json": VALID_NET, "f.npy": VALID_NPY, "f.json": b"[[1.0, 2.0], [3.0, 4.0]]"},
        capsys,
        tmp_path_factory,
        monkeypatch,
    )


# --- pipes and signals: a real process ------------------------------------------------------


def _closed_pipe_run(args, tmp_path):
    """Run ``asyncnet ARGS`` with stdout a pipe whose reader is already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "asyncnet", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            timeout=90,
        )
    finally:
        os.close(write_end)
    return res.returncode, res.stderr.decode()


@pytest.mark.parametrize(
    "args, expect",
    [
        (["ops"], 141),
        (["run", "net.json", "--feed", "x=x.npy", "--fetch", "y"], 141),
        (["--help"], 0),  # argparse itself ignores a failed write of its help
    ],
)
def test_closed_stdout_exits_quietly(tmp_path, args, expect):
    (tmp_path / "net.json").write_text(json.dumps(RELU_NET))
    (tmp_path / "x.npy").write_bytes(npy_bytes(np.arange(10_000.0)))
    status, err = _closed_pipe_run(args, tmp_path)
    assert (status, err) == (expect, "")


# The program as the console script runs it, telling us when its imports are done: a Ctrl-C
# while Python imports the asyncnet package is Python's own business (no asyncnet code runs yet).
PROGRAM = (
    "import sys; from asyncnet.cli.main import main; print('imported', file=sys.stderr, flush=True); sys.exit(main())"
)


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_sigint_during_run_is_one_line(tmp_path, net_type):
    """Ctrl-C deep in a run of a billion iterations prints one line and exits 130."""
    (tmp_path / "net.json").write_bytes(VALID_NET.replace(b"async_scheduling", net_type.encode()))
    (tmp_path / "x.npy").write_bytes(npy_bytes(np.ones((200, 200), np.float32)))
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, "run", "net.json", "--feed", "x=x.npy", "--iters", "1000000000"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr.readline() == b"imported\n"
        time.sleep(0.5)  # the run is under way
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, err.decode()) == (130, "asyncnet: interrupted\n")
