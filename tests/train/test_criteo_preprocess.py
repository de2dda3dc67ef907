"""The reference's other Criteo preprocessing (facebookresearch/dlrm data_utils.getCriteoAdData,
written out here): without ``max_ind_range`` each column's categories are numbered 0, 1, ... in
order of first appearance (its dictionaries), and ``data_sub_sample_rate`` leaves out each
unclicked line whose uniform draw (one per line of the file, numpy's legacy generator from the
seed) is below the rate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncnet.errors import TrainConfigError
from asyncnet.train import criteo

pytestmark = pytest.mark.timeout(300)
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCNET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def lines_with_repeats(n: int, seed: int = 0, labeled: bool = True) -> list[str]:
    """Kaggle lines whose categories come from small pools (so they repeat), some empty."""
    rng = np.random.default_rng(seed)
    pools = [[f"{int(v):08x}" for v in rng.integers(0, 2**32, 3 + 2 * j)] for j in range(26)]
    out = []
    for _ in range(n):
        counts = [str(int(rng.integers(0, 50))) for _ in range(13)]
        cats = ["" if rng.random() < 0.1 else pools[j][int(rng.integers(0, len(pools[j])))] for j in range(26)]
        label = [str(int(rng.random() < 0.3))] if labeled else []
        out.append("\t".join([*label, *counts, *cats]) + "\n")
    return out


def reference_dense_ids(lines: list[str]) -> tuple[np.ndarray, list[int]]:
    """data_utils: X_cat = int(hex, 16) ('' is '0'); convertDicts[j][x] = 1 in line order, then
    each key numbered by its position; counts = the dictionaries' sizes."""
    raw = [[int(x or "0", 16) for x in line.rstrip("\n").split("\t")[14:]] for line in lines]
    dicts: list[dict[int, int]] = [{} for _ in range(26)]
    for row in raw:
        for j, x in enumerate(row):
            dicts[j][x] = 1
    for d in dicts:
        for i, x in enumerate(d):
            d[x] = i
    return np.array([[dicts[j][x] for j, x in enumerate(row)] for row in raw]), [len(d) for d in dicts]


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(lines))
    return str(path)


def all_ids(log: criteo.ExampleLog) -> np.ndarray:
    return np.stack([np.asarray(log.ids[k]) for k in range(26)], 1)


@pytest.mark.parametrize("max_ind_range", [-1, 0])
def test_without_a_range_categories_are_numbered_by_first_appearance(tmp_path, max_ind_range):
    lines = lines_with_repeats(400)
    want, counts = reference_dense_ids(lines)
    log = criteo.load_kaggle(write(tmp_path / "t.txt", lines), max_ind_range, chunk_rows=64)
    np.testing.assert_array_equal(all_ids(log), want)
    assert log.table_sizes == counts and max(counts) < 60  # the pools: few distinct values per column
    again = criteo.load_kaggle(str(tmp_path / "t.txt"), max_ind_range)  # from the cache
    np.testing.assert_array_equal(all_ids(again), want)


def reference_sub_sample(lines: list[str], rate: float, seed: int) -> list[int]:
    """The lines (0-based) getCriteoAdData keeps: rand_u = np.random.uniform(size=lines) after
    np.random.seed(seed); a line with target 0 and rand_u[k] < rate is dropped."""
    np.random.seed(seed)
    rand_u = np.random.uniform(low=0.0, high=1.0, size=len(lines))
    return [k for k, line in enumerate(lines) if not (line.split("\t")[0] == "0" and rand_u[k] < rate)]


@pytest.mark.parametrize("rate, seed", [(0.5, 123), (0.875, 7)])
def test_sub_sampling_drops_the_references_unclicked_lines(tmp_path, rate, seed):
    lines = lines_with_repeats(500, seed=1)
    keep = reference_sub_sample(lines, rate, seed)
    path = write(tmp_path / "t.txt", lines)
    full = criteo.load_kaggle(path, 1000)
    log = criteo.load_kaggle(path, 1000, chunk_rows=37, sub_sample=(rate, seed))
    assert len(log) == len(keep) < len(full)
    np.testing.assert_array_equal(np.asarray(log.targets), np.asarray(full.targets)[keep])
    np.testing.assert_array_equal(np.asarray(log.dense), np.asarray(full.dense)[keep])
    np.testing.assert_array_equal(all_ids(log), all_ids(full)[keep])
    assert np.asarray(log.targets).sum() == np.asarray(full.targets).sum()  # every click stays


def test_sub_sampling_and_dense_ids_together_count_only_kept_lines(tmp_path):
    lines = lines_with_repeats(300, seed=2)
    keep = reference_sub_sample(lines, 0.6, 123)
    want, counts = reference_dense_ids([lines[k] for k in keep])
    log = criteo.load_kaggle(write(tmp_path / "t.txt", lines), -1, sub_sample=(0.6, 123))
    np.testing.assert_array_equal(all_ids(log), want)
    assert log.table_sizes == counts


def test_a_skipped_bad_line_still_takes_its_draw(tmp_path):
    lines = lines_with_repeats(200, seed=3)
    keep = reference_sub_sample(lines, 0.5, 5)
    bad = 10 if 10 in keep else next(k for k in keep)
    broken = list(lines)
    broken[bad] = "x\tnot a line\n"
    log = criteo.load_kaggle(write(tmp_path / "t.txt", broken), 1000, "skip", sub_sample=(0.5, 5))
    full = criteo.load_kaggle(write(tmp_path / "full.txt", lines), 1000)
    rows = [k for k in keep if k != bad]
    assert log.skipped == 1 and len(log) == len(rows)
    np.testing.assert_array_equal(np.asarray(log.dense), np.asarray(full.dense)[rows])


def test_unlabelled_files_are_never_sub_sampled(tmp_path):
    lines = lines_with_repeats(50, seed=4, labeled=False)
    log = criteo.load_kaggle(write(tmp_path / "test.txt", lines), 1000, sub_sample=(0.9, 1))
    assert len(log) == 50 and not log.labeled


def test_options_that_do_not_apply_are_one_clear_error(tmp_path):
    with pytest.raises(TrainConfigError, match="not of random: data"):
        criteo.load_click_data("random:tables=5-5,batches=1,batch=4", {"data_sub_sample_rate": 0.5})
    with pytest.raises(TrainConfigError, match=r"in \[0, 1\)"):
        criteo.load_kaggle(write(tmp_path / "t.txt", lines_with_repeats(5)), 10, sub_sample=(1.0, 1))


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_terabyte_days_number_categories_by_first_appearance_over_the_days(tmp_path, rate):
    shared, other = lines_with_repeats(300, seed=6), lines_with_repeats(100, seed=9)
    day_lines = [shared[:150], other, shared[150:]]  # day 2 repeats day 0's values, day 1 brings new ones
    folder = tmp_path / "days"
    folder.mkdir()
    for i, lines in enumerate(day_lines):
        write(folder / f"day_{i}", lines)
    kept = [
        [day[k] for k in reference_sub_sample(day, rate, 11 + i)] if rate else day for i, day in enumerate(day_lines)
    ]
    want, counts = reference_dense_ids([line for day in kept for line in day])  # one dictionary over the days
    options = {"max_ind_range": -1, "data_sub_sample_rate": rate, "numpy_rand_seed": 11}
    log = criteo.load_click_data(str(folder), options)
    rows = np.arange(len(log))
    np.testing.assert_array_equal(np.stack([log.ids[k][rows] for k in range(26)], 1), want)
    assert log.table_sizes == counts and counts != reference_dense_ids(kept[0])[1]
    batch = log.batch(rows[::7])  # the feeds carry the days' common ids
    np.testing.assert_array_equal(batch["ids3"], want[::7, 3])
    again = criteo.load_click_data(str(folder), options)  # from the days' caches
    assert again.table_sizes == counts


def test_cli_trains_on_dense_ids_with_sub_sampling(tmp_path, cache):
    path = write(tmp_path / "train.txt", lines_with_repeats(400, seed=5))
    env = {"PYTHONPATH": SRC, "ASYNCNET_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    args = ["--model", "dlrm", "--data", path, "--epochs", "1", "--batch-size", "32", "--mode", "local"]
    args += ["--workers", "1", "--model-arg", "max_ind_range=-1", "--model-arg", "data_sub_sample_rate=0.5"]
    r = subprocess.run(
        [sys.executable, "-m", "asyncnet", "train", *args, "--out", str(tmp_path / "run"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]
    lines = lines_with_repeats(400, seed=5)
    keep = reference_sub_sample(lines, 0.5, 123)
    assert cfg["model_args"]["table_sizes"] == reference_dense_ids([lines[k] for k in keep])[1]
    p = subprocess.run(
        [sys.executable, "-m", "asyncnet", "predict", str(tmp_path / "run"), "--data", path],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
        check=False,
    )
    assert p.returncode != 0 and "does not carry over" in p.stderr and "Traceback" not in p.stderr
