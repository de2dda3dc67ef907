import json
import subprocess
import sys

import numpy as np
import pytest

from asyncnet.cli.main import main


def write_net(tmp_path, ops, name="n"):
    path = tmp_path / "net.json"
    path.write_text(json.dumps({"name": name, "ops": ops}))
    return str(path)


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and "asyncnet" in capsys.readouterr().out


def test_run_feed_fetch_save(tmp_path, capsys):
    net = write_net(tmp_path, [{"type": "Relu", "inputs": ["x"], "outputs": ["y"]}])
    np.save(tmp_path / "x.npy", np.array([-1.0, 2.0]))
    out = tmp_path / "out.npz"
    assert main(["run", net, "--feed", f"x={tmp_path / 'x.npy'}", "--fetch", "y", "--save", str(out)]) == 0
    assert "y = [0. 2.]" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out)["y"], [0.0, 2.0])


@pytest.mark.parametrize(
    "content, expect",
    [
        (None, "cannot read net file"),
        ("{not json", "invalid JSON"),
        ('{"name": "n", "ops": [{"type": "Rellu", "inputs": ["x"], "outputs": ["y"]}]}', "Did you mean 'Relu'"),
        ('{"name": "n", "ops": [{"type": "Relu", "inputs": ["x"], "outputs": ["y"]}]}', "'x' does not exist"),
    ],
)
def test_bad_files_one_line_error(tmp_path, capsys, content, expect):
    path = tmp_path / "net.json"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert expect in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_feed_spec(tmp_path, capsys):
    net = write_net(tmp_path, [])
    assert main(["run", net, "--feed", "nofile"]) == 1
    assert "NAME=FILE.npy" in capsys.readouterr().err
    assert main(["run", net, "--feed", "x=/no/such.npy"]) == 1


def test_ops_lists_and_describes(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "FC" in out and "ConstantFill" in out
    assert main(["ops", "FC"]) == 0
    assert "arg axis" in capsys.readouterr().out
    assert main(["ops", "Nope"]) == 1


def test_console_script_runs():
    res = subprocess.run([sys.executable, "-m", "asyncnet", "ops"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "Softmax" in res.stdout


def test_unknown_subcommand_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
