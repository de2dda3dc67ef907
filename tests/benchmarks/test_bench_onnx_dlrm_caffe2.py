"""Smoke runs of the onnx_inference, dlrm and caffe2_overhead benchmarks in their quick modes,
through ``python -m benchmarks`` as ``all`` runs them (timings are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import benchmarks


def _run_json(name: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", name, "--quick", "--json", *args],
        env=benchmarks.child_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_three_are_listed():
    assert {"onnx_inference", "dlrm", "caffe2_overhead"} <= set(benchmarks.available())


@pytest.mark.timeout(300)
def test_onnx_inference_quick():
    pytest.importorskip("onnxruntime")
    out = _run_json("onnx_inference", "--model", "lstm")
    (r,) = out["results"]
    assert r["model"] == "lstm" and len(out["load_before"]) == 3
    peers = {
        "asyncnet simple numpy 1t",
        "asyncnet async_scheduling torch 2w x 1t",
        "asyncnet simple torch 2t",
        "onnxruntime 1t",
        "torch eager 2t",
    }
    assert peers <= set(r["latency_ms"]) and peers <= set(r["throughput"])
    assert r["threads"]["asyncnet simple numpy 1t"] == {"blas": 1, "torch": 1}  # every asyncnet label's, measured
    assert r["threads"]["asyncnet simple torch 2t"]["torch"] == 2
    assert all(v > 0 for v in [*r["latency_ms"].values(), *r["throughput"].values(), *r["import_s"].values()])


@pytest.mark.timeout(300)
def test_dlrm_quick():
    out = _run_json("dlrm")
    assert set(out["train"]) == {"zoo 1 thread(s)", "zoo 2 thread(s)"}
    steps = out["train"]["zoo 1 thread(s)"]
    assert "pytorch eager (DLRM_Net)" in steps and all(s["ms_per_step"] > 0 for s in steps.values())
    assert {"asyncnet numpy lookup", "asyncnet torch update", "pytorch EmbeddingBag lookup"} <= set(out["ops"])


@pytest.mark.timeout(120)
def test_caffe2_overhead_quick():
    out = _run_json("caffe2_overhead")
    assert out["iters"] == 20 and out["rounds"] == 3 and out["same_outputs"] is True
    assert out["caffe2_runnet_us"] > 0 and out["asyncnet_run_net_us"] > 0
