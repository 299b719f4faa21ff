"""fabkv.figures (make figures): the report from recorded records, and the sentence's logic."""
import json
import os
import pathlib
import re

import pytest

from fabkv import figures

DATA = pathlib.Path(__file__).resolve().parent / "data"
RECORDS = DATA / "figures-quick.jsonl"  # a few records of each run of `make figures QUICK=1`
PAPER = figures.PAPER_TOML  # the real python/fabkv/paper.toml


def sections(text):
    """{figure id: its markdown} of a figures.md."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split(":", 1)[0]: p for p in parts}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    records = figures.read_records(str(RECORDS))
    text = figures.render(records, str(out), str(PAPER))
    return text, json.loads((out / "figures.json").read_text()), out


def test_every_figure_has_its_section_with_paper_fabkv_and_model(rendered):
    text, doc, _ = rendered
    found = sections(text)
    assert set(found) == {s.id for s in figures.SPECS}
    for fid, body in found.items():
        header = next(line for line in body.splitlines() if line.startswith("| panel"))
        assert re.search(r"\| paper \(.*\) \| fabkv here \| model: fabkv's mix on \w+", header)
        assert "**Shape.** " in body, fid
        rows = [r for r in body.splitlines() if r.startswith("| ") and not r.startswith("| panel")]
        assert rows, f"{fid}: no rows"
    assert {d["id"] for d in doc} == {s.id for s in figures.SPECS}
    # Every figure has a value measured here in the fixture, and the model a column where it
    # applies: the fixture holds what a QUICK run wrote.
    for d in doc:
        assert any(r["fabkv"] is not None for r in d["rows"]), d["id"]
        if d["model"] == "throughput":
            assert any(r["model"] is not None for r in d["rows"]), d["id"]


def test_the_papers_numbers_stand_beside_fabkvs(rendered):
    pytest.importorskip("fabkv.paper")
    text, doc, _ = rendered
    rows = next(d for d in doc if d["id"] == "herd-fig9")["rows"]
    fig9 = {(r["series"], r["x"]): r for r in rows}
    herd = fig9[("HERD", "read-intensive")]
    assert herd["paper"] == 18.5 and herd["fabkv"] > 0 and herd["model"] > 0
    assert herd["design"] == pytest.approx(20.8, rel=0.01)  # docs/model.md, Validation
    body = sections(text)["herd-fig9"]
    assert "| ~18.5 |" in body and "The model of the paper's own designs" in body
    assert "no number for this figure" in sections(text)["survey-fig20"]


# --- the sentence: orderings and scale computed from the numbers --------------------------------

def k(series, x, panel=""):
    return (panel, series, x)


PAPER_NUMS = {k("herd", "GET"): 18.0, k("farm", "GET"): 9.0, k("pilaf", "GET"): 7.0}


def test_same_ordering_agrees():
    here = {k("herd", "GET"): 0.40, k("farm", "GET"): 0.20, k("pilaf", "GET"): 0.10}
    assert figures.pairs(PAPER_NUMS, here)[:2] == (3, 3)
    s = figures.shape_sentence(PAPER_NUMS, here, {}, "shm", "cx3")
    assert s.startswith("3 of 3 orderings between the paper's numbers hold here;")
    assert "(not:" not in s
    assert "measured here at GET: herd > farm > pilaf" in s
    assert "0.022x the paper's" in s and "memory copy by the CPU" in s


def test_a_different_ordering_is_named_with_its_ratios():
    here = {k("herd", "GET"): 0.10, k("farm", "GET"): 0.20, k("pilaf", "GET"): 0.05}
    agree, total, bad = figures.pairs(PAPER_NUMS, here)
    assert (agree, total) == (2, 3)
    assert [(a[1], b[1]) for a, b, *_ in bad] == [("farm", "herd")]
    s = figures.shape_sentence(PAPER_NUMS, here, {}, "shm", "cx3")
    assert s.startswith("2 of 3 orderings")
    assert "farm at GET vs herd at GET: paper 0.50x, here 2.00x" in s


def test_the_model_says_whether_the_fabric_or_the_verb_mix_differs():
    here = {k("herd", "GET"): 0.10, k("farm", "GET"): 0.20, k("pilaf", "GET"): 0.05}
    keeps = {k("herd", "GET"): 20.0, k("farm", "GET"): 10.0, k("pilaf", "GET"): 8.0}
    s = figures.shape_sentence(PAPER_NUMS, here, keeps, "shm", "cx3")
    assert "keeps the paper's order in 1 of the 1 pairs" in s and "cost of a verb" in s
    flips = {k("herd", "GET"): 10.0, k("farm", "GET"): 20.0, k("pilaf", "GET"): 8.0}
    s = figures.shape_sentence(PAPER_NUMS, here, flips, "shm", "cx3")
    assert "does not keep the paper's order either" in s and "cost of a verb" not in s


def test_within_ten_percent_is_equal_and_pairs_stay_in_a_panel_and_an_axis():
    paper = {k("herd", "read"): 18.5, k("herd", "write"): 18.5}
    assert figures.pairs(paper, {k("herd", "read"): 1.05, k("herd", "write"): 1.0})[:2] == (1, 1)
    assert figures.pairs(paper, {k("herd", "read"): 1.5, k("herd", "write"): 1.0})[:2] == (0, 1)
    # two series at two different x, or two panels: not a pair
    apart = {k("a", 1.0): 1.0, k("b", 2.0): 2.0, k("a", 1.0, "p"): 3.0}
    assert figures.pairs(apart, apart)[1] == 0


def test_no_numbers_no_claim_of_agreement():
    here = {k("herd", "8 clients"): 0.4, k("redis", "8 clients"): 0.05}
    s = figures.shape_sentence({}, here, {}, "shm", "cx3")
    assert "states no number" in s and "hold here" not in s
    assert "herd > redis" in s


def test_model_check_reports_misses_and_why():
    rows = [{"series": "a", "x": "GET", "paper": 10.0, "relation": "=", "design": 13.0},
            {"series": "b", "x": "GET", "paper": 10.0, "relation": "~", "design": 10.5},
            {"series": "c", "x": "GET", "paper": 10.0, "relation": "<", "design": 50.0}]
    s = figures.model_check(rows, {"a": "a reason"})
    assert s.startswith("The model of the paper's own designs is within 20% of the paper at 1 of 2")
    assert "a at GET by +30% (a reason)" in s


@pytest.mark.server
@pytest.mark.skipif("shm" not in os.environ.get("FABKV_TEST_PROVIDERS", "shm,tcp").split(","),
                    reason="the runner measures on shm; once is enough")
def test_the_runner_runs_one_figure_and_renders_it(tmp_path):
    # make figures QUICK=1 for one figure: the three sequencers, 0.2 s each, real servers.
    build = pathlib.Path(os.environ.get("FABKV_SERVER_BIN", "build/bin/fabkv-server")).parents[1]
    code = figures.main(["run", "--quick", "--only", "guidelines-table3", "--build", str(build),
                         "--out", str(tmp_path), "--paper", str(PAPER)])
    assert code == 0
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert runs["quick"] and runs["failures"] == []
    records = figures.read_records(str(tmp_path / "records.jsonl"))
    assert {r["protocol"] for r in records} == {"seq-rpc", "seq-spec", "seq-atomic"}
    assert all(r["figures_run"] == "guidelines-table3" and r["throughput_ops"] > 0
               for r in records)
    body = sections((tmp_path / "figures.md").read_text())
    assert set(body) == {"guidelines-table3"} and "**Shape.** " in body["guidelines-table3"]


def test_failed_runs_are_named_and_a_figure_without_records_says_so(tmp_path):
    records = [r for r in figures.read_records(str(RECORDS))
               if r["figures_run"] != "guidelines-table3"]
    text = figures.render(records, str(tmp_path), str(PAPER),
                          failures=["guidelines-table3: exit 1: no server"])
    assert "**Runs that failed**" in text and "- guidelines-table3: exit 1: no server" in text
    assert "no records: the run did not complete" in sections(text)["guidelines-table3"]
    assert "no records" not in sections(text)["herd-fig9"]
