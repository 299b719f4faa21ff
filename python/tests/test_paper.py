"""fabkv.paper and paper.toml, the papers' numbers for the figures report (docs/figures.md):
every figure id once, every point numeric and quoted, every quote found in its seed text when
the seeds are at hand, and the schema's errors."""
import os
import pathlib
import subprocess
import sys

import pytest

from fabkv import model, paper

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPER_PY = ROOT / "python" / "fabkv" / "paper.py"

# The figures of issue #28 item 1, by these ids (the figures report looks them up).
IDS = [
    "herd-fig9", "herd-fig10", "herd-fig11", "herd-fig12", "pilaf-fig6", "pilaf-fig9",
    "guidelines-table3", "guidelines-fig10", "rfrpc-fig5", "rfrpc-fig13", "rfrpc-fig14",
    "survey-fig12", "survey-fig13", "survey-fig14", "survey-fig15", "survey-fig16",
    "survey-fig17", "survey-fig18", "survey-fig19", "survey-fig20",
]

# The seeds: $FABKV_SEEDS, else ../shared/seeds beside the checkout (absent from CI's clones).
SEEDS = pathlib.Path(os.environ.get("FABKV_SEEDS") or ROOT.parent / "shared" / "seeds")
needs_seeds = pytest.mark.skipif(
    not sorted(SEEDS.glob("00[0-4]_*.txt")),
    reason=f"no seed texts at {SEEDS} (set FABKV_SEEDS): quotes not checked")

# A valid figure to break one key at a time.
MINIMAL = """
[[figure]]
id = "herd-fig9"
paper = "HERD"
seed = "000"
ref = "fig. 9"
title = "t"
setup = "s"
x = "workload"
y = "throughput"
unit = "Mops"
nic = "cx3"
claims = ["c"]

[[figure.point]]
series = "HERD"
x = "read-intensive"
y = 18.5
quote = "about 18.5 Mops"
"""


def test_every_figure_once():
    figures = paper.load()
    assert sorted(f.id for f in figures) == sorted(IDS)
    for i in IDS:
        assert paper.by_id(i, figures).id == i
    with pytest.raises(KeyError):
        paper.by_id("herd-fig99", figures)


def test_the_installed_file_is_the_one_loaded():
    # The build tree's (and a wheel's) paper.toml is a copy of the source's.
    assert paper.PAPER_TOML.read_bytes() == (ROOT / "python" / "fabkv" / "paper.toml").read_bytes()


def test_every_point_is_numeric_and_quoted():
    n = 0
    for f in paper.load():
        assert f.seed == paper.SEEDS[f.paper]
        assert f.claims or f.points, f.id
        assert f.testbed, f.id  # optional in the schema, given for every figure here
        for p in f.points:
            assert isinstance(p.y, float) and p.quote.strip(), (f.id, p)
            n += 1
    assert n >= 30


def test_the_nics_are_the_models():
    assert set(paper.NICS) - {""} == set(model.NICS)
    for f in paper.load():
        for p in f.points:
            assert f.nic_of(p) in model.NICS or f.nic_of(p) == "", (f.id, p)


def test_headline_numbers():
    # A few numbers that docs/model.md and the figures report lean on.
    ys = {(f.id, p.series, p.x): p.y for f in paper.load() for p in f.points}
    assert ys[("herd-fig9", "HERD", "read-intensive")] == 18.5
    assert ys[("herd-fig9", "FaRM-em", "GET")] == 9.2
    assert ys[("guidelines-table3", "sequencer", "Spec-S0")] == 122
    assert ys[("guidelines-fig10", "CX3", 10.0)] == 28
    assert ys[("pilaf-fig6", "3-way cuckoo, average", 0.75)] == 1.6


@needs_seeds
def test_every_quote_is_in_its_seed():
    assert paper.check_quotes(paper.load(), SEEDS) == []


@needs_seeds
def test_a_tampered_quote_is_caught():
    figures = paper.parse(MINIMAL.replace("about 18.5 Mops", "about 26 Mops"))
    errors = paper.check_quotes(figures, SEEDS)
    assert len(errors) == 1 and "herd-fig9, point #1" in errors[0] and "26 Mops" in errors[0]
    # The same point with the text's words passes, across the text's line breaks too.
    assert paper.check_quotes(paper.parse(MINIMAL), SEEDS) == []
    assert paper.check_quotes(paper.parse(MINIMAL.replace(
        "about 18.5 Mops", "about 18.5 Mops, which is close to the throughput")), SEEDS) == []


def test_quotes_are_matched_with_whitespace_collapsed(tmp_path):
    (tmp_path / "000_x.txt").write_text("HERD achieve about\n18.5   Mops, which\n")
    assert paper.check_quotes(paper.parse(MINIMAL), tmp_path) == []
    (tmp_path / "000_x.txt").write_text("HERD achieve about 19.5 Mops\n")
    assert len(paper.check_quotes(paper.parse(MINIMAL), tmp_path)) == 1


@pytest.mark.parametrize("old,new,message", [
    ('claims = ["c"]', 'claims = ["c"]\ncolour = "red"', "unknown key(s) colour"),
    ('quote = "about 18.5 Mops"', 'quote = "about 18.5 Mops"\nsource = "x"',
     "unknown key(s) source"),
    ('title = "t"\n', "", "missing title"),
    ('quote = "about 18.5 Mops"', "", "missing quote"),
    ('quote = "about 18.5 Mops"', 'quote = " "', "quote must be a non-empty string"),
    ("y = 18.5", 'y = "18.5"', "y must be a number"),
    ("y = 18.5", "y = true", "y must be a number"),
    ('seed = "000"', 'seed = "001"', "HERD is seed 000"),
    ('paper = "HERD"', 'paper = "FaRM"', "paper 'FaRM' is none of"),
    ('nic = "cx3"', 'nic = "cx4"', "nic 'cx4' is none of"),
    ('claims = ["c"]', 'claims = "c"', "claims must be a list"),
    ("y = 18.5", 'y = 18.5\nrelation = "about"', "relation 'about' is none of"),
    ('x = "read-intensive"', "x = true", "x must be a number or a non-empty string"),
    ('claims = ["c"]', 'claims = ["c"]\ntestbed = 1', "testbed must be a string"),
    ("y = 18.5", 'y = 18.5\nnic = "cx5"', "nic 'cx5' is none of"),
])
def test_schema_errors(old, new, message):
    assert old in MINIMAL
    with pytest.raises(paper.SchemaError, match=r"figure herd-fig9.*" + message.replace(
            "(", r"\(").replace(")", r"\)")):
        paper.parse(MINIMAL.replace(old, new, 1))


def test_duplicate_ids_and_empty_files():
    with pytest.raises(paper.SchemaError, match="id herd-fig9 twice"):
        paper.parse(MINIMAL + MINIMAL)
    with pytest.raises(paper.SchemaError, match="no \\[\\[figure\\]\\]"):
        paper.parse("")
    with pytest.raises(paper.SchemaError, match="not TOML"):
        paper.parse("[[figure]\n")
    with pytest.raises(paper.SchemaError, match="unknown top-level key"):
        paper.parse(MINIMAL + "\n[extra]\na = 1\n")


def test_run_as_a_file(tmp_path):
    # From a checkout, by path, as the figures report and model.py are run.
    out = subprocess.run([sys.executable, str(PAPER_PY), "--seeds", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "expected one" in out.stderr  # an empty seeds folder
    bad = tmp_path / "paper.toml"
    bad.write_text(MINIMAL.replace("y = 18.5", 'y = "high"'))
    out = subprocess.run([sys.executable, str(PAPER_PY), "--file", str(bad)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "y must be a number" in out.stderr
    if sorted(SEEDS.glob("00[0-4]_*.txt")):
        out = subprocess.run([sys.executable, str(PAPER_PY), "--seeds", str(SEEDS)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "herd-fig9" in out.stdout and "quotes:" in out.stdout
