"""fabkv.report, the bench report, on results recorded in docs/results/."""
import pathlib
import subprocess
import sys

import pytest

from fabkv import report

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "bench-2026-11-21.jsonl"


def test_summary_of_recorded_results(tmp_path):
    runs = report.load(str(RESULTS))
    table = report.median_runs(runs)
    text = report.summary(table, runs, str(tmp_path), [])
    assert (tmp_path / "summary.md").read_text() == text
    assert "## Runs (median of repeats)" in text
    assert "fabkv:herd" in text and "memcached" in text


def test_the_uniformity_figure_uses_the_independent_mode_and_says_so(tmp_path):
    shared = report.load(str(RESULTS))
    assert report.uniformity_source(shared)[0] == "shared"  # recorded before the modes
    assert "records of the shared client mode" in report.summary(
        report.median_runs(shared), shared, str(tmp_path), [])
    # The same runs again as independent-mode records with one client starved: fig. 20 must
    # take those, and only those.
    independent = [dict(r, client_mode="independent", uniformity_ratio=7.5) for r in shared]
    both = shared + independent
    mode, used = report.uniformity_source(both)
    assert mode == "independent" and used == independent
    table = report.median_runs(used)
    assert {v["uniformity"] for v in table.values()} == {7.5}
    assert "records of the independent client mode" in report.summary(
        report.median_runs(both), both, str(tmp_path), [])


def test_a_bad_line_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"system": "fabkv"}\n')
    with pytest.raises(SystemExit, match="bad.jsonl:1: missing"):
        report.load(str(bad))


def test_the_file_runs_alone_as_fabkv_bench_runs_it(tmp_path):
    # fabkv-bench report runs python/fabkv/report.py by path (src/bench/report.cc): without
    # matplotlib it must say so, with it write the plots.
    r = subprocess.run([sys.executable, str(ROOT / "python" / "fabkv" / "report.py"),
                        "--input", str(RESULTS), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=240)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert r.returncode != 0 and "matplotlib is missing" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "summary.md").exists() and list(tmp_path.glob("*.png"))


def test_shared_and_independent_runs_of_one_configuration_stay_apart(tmp_path):
    shared = report.load(str(RESULTS))
    independent = [dict(r, client_mode="independent", throughput_ops=1.0) for r in shared]
    table = report.median_runs(shared + independent)
    assert len(table) == 2 * len(report.median_runs(shared))
    assert {v["throughput"] for k, v in table.items() if k[-1] == "independent"} == {1.0}
    assert all(v["throughput"] != 1.0 for k, v in table.items() if k[-1] == "shared")
    assert "(independent)" in report.summary(table, shared + independent, str(tmp_path), [])
