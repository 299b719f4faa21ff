#!/usr/bin/python3
"""The papers' numbers for the figures report: paper.toml, next to this file, loaded and checked.

    python3 -m fabkv.paper [--seeds DIR]            (the installed package)
    python3 python/fabkv/paper.py [--seeds DIR]     (this file alone, from a checkout)

Each [[figure]] of paper.toml is one figure or table of a seed paper (../shared/seeds/README.md
maps the seeds): its setup, its axes, the text's claims about its shape, and every number the
text states about it as a [[figure.point]], with `quote`, the shortest passage of the seed text
that states it. `load()` returns the figures as dataclasses and refuses a file that does not
follow the schema (unknown keys, missing fields, wrong types, duplicate ids); `check_quotes()`
finds every quote in its seed text once runs of whitespace are collapsed to one space. docs/
figures.md ("The papers' numbers") says how to add a number. Standard library only (tomllib,
Python 3.11; tomli when installed on older versions), so that the figures report can import it
or run it by path like model.py and report.py.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

try:
    import tomllib as _toml
except ImportError:  # Python < 3.11
    try:
        import tomli as _toml  # type: ignore[no-redef, import]
    except ImportError:
        _toml = None  # type: ignore[assignment]

PAPER_TOML = pathlib.Path(__file__).resolve().with_name("paper.toml")

# The seed file of each paper (../shared/seeds/README.md).
SEEDS = {"HERD": "000", "Guidelines": "001", "Survey": "002", "Pilaf": "003", "RF-RPC": "004"}
# The NICs of python/fabkv/model.py (NICS), "" when none of them is the paper's testbed.
# python/tests/test_paper.py holds this list against model.NICS.
NICS = ("", "cx3", "cib", "cx3-rfrpc")
# How the text states a number: exactly (=), approximately (~), as a bound (< or >).
RELATIONS = ("=", "~", "<", ">")

X = Union[str, float]
PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Point:
    """One number the text states about a figure: `y` at position `x` of series `series`."""
    series: str
    x: X
    y: float
    quote: str              # shortest exact passage of the seed text stating it
    relation: str = "="     # the text says y exactly, about (~), below (<) or above (>)
    note: str = ""          # how the number follows from the quote, when not literally
    nic: str = ""           # this point's testbed when it is not the figure's


@dataclass(frozen=True)
class Figure:
    """One figure or table of a paper: its setup, axes, claims and stated numbers."""
    id: str
    paper: str
    seed: str
    ref: str
    title: str
    setup: str
    x: str
    y: str
    unit: str
    nic: str
    claims: List[str] = field(default_factory=list)
    points: List[Point] = field(default_factory=list)
    testbed: str = ""       # the machines, NIC, PCIe link, cores, client machines

    def nic_of(self, point: Point) -> str:
        """The model's NIC for `point`: its own when it names one, else the figure's."""
        return point.nic or self.nic


class SchemaError(ValueError):
    """paper.toml does not follow the schema; the message names the figure and the key."""


_FIGURE_STR = ("id", "paper", "seed", "ref", "title", "setup", "x", "y", "unit", "nic")
_FIGURE_KEYS = set(_FIGURE_STR) | {"claims", "point", "testbed"}
_POINT_REQUIRED = ("series", "x", "y", "quote")
_POINT_KEYS = set(_POINT_REQUIRED) | {"relation", "note", "nic"}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _point(where: str, raw: Any) -> Point:
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: a point must be a table")
    unknown = sorted(set(raw) - _POINT_KEYS)
    if unknown:
        raise SchemaError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in _POINT_REQUIRED if k not in raw]
    if missing:
        raise SchemaError(f"{where}: missing {', '.join(missing)}")
    if not isinstance(raw["series"], str) or not raw["series"]:
        raise SchemaError(f"{where}: series must be a non-empty string")
    x = raw["x"]
    if not (isinstance(x, str) and x) and not _is_number(x):
        raise SchemaError(f"{where}: x must be a number or a non-empty string, not {x!r}")
    if not _is_number(raw["y"]):
        raise SchemaError(f"{where}: y must be a number, not {raw['y']!r}")
    if not isinstance(raw["quote"], str) or not raw["quote"].strip():
        raise SchemaError(f"{where}: quote must be a non-empty string")
    relation = raw.get("relation", "=")
    if relation not in RELATIONS:
        raise SchemaError(f"{where}: relation {relation!r} is none of {' '.join(RELATIONS)}")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise SchemaError(f"{where}: note must be a string")
    nic = raw.get("nic", "")
    if nic not in NICS:
        raise SchemaError(f"{where}: nic {nic!r} is none of {NICS}")
    return Point(series=raw["series"], x=float(x) if _is_number(x) else x, y=float(raw["y"]),
                 quote=raw["quote"], relation=relation, note=note, nic=nic)


def _figure(index: int, raw: Any) -> Figure:
    where = f"figure #{index + 1}"
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: must be a table")
    if isinstance(raw.get("id"), str):
        where = f"figure {raw['id']}"
    unknown = sorted(set(raw) - _FIGURE_KEYS)
    if unknown:
        raise SchemaError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in _FIGURE_STR + ("claims",) if k not in raw]
    if missing:
        raise SchemaError(f"{where}: missing {', '.join(missing)}")
    for k in _FIGURE_STR:
        if not isinstance(raw[k], str):
            raise SchemaError(f"{where}: {k} must be a string")
    for k in ("id", "paper", "ref", "title", "setup", "x", "y"):
        if not raw[k].strip():
            raise SchemaError(f"{where}: {k} is empty")
    if raw["paper"] not in SEEDS:
        raise SchemaError(f"{where}: paper {raw['paper']!r} is none of {', '.join(SEEDS)}")
    if raw["seed"] != SEEDS[raw["paper"]]:
        raise SchemaError(f"{where}: {raw['paper']} is seed {SEEDS[raw['paper']]}, "
                          f"not {raw['seed']!r}")
    if raw["nic"] not in NICS:
        raise SchemaError(f"{where}: nic {raw['nic']!r} is none of {NICS}")
    claims = raw["claims"]
    if not isinstance(claims, list) or not all(isinstance(c, str) and c for c in claims):
        raise SchemaError(f"{where}: claims must be a list of non-empty strings")
    points_raw = raw.get("point", [])
    if not isinstance(points_raw, list):
        raise SchemaError(f"{where}: point must be an array of tables ([[figure.point]])")
    points = [_point(f"{where}, point #{i + 1}", p) for i, p in enumerate(points_raw)]
    if points and not raw["unit"].strip():
        raise SchemaError(f"{where}: unit is empty but the figure has points")
    testbed = raw.get("testbed", "")
    if not isinstance(testbed, str):
        raise SchemaError(f"{where}: testbed must be a string")
    return Figure(**{k: raw[k] for k in _FIGURE_STR}, claims=list(claims), points=points,
                  testbed=testbed)


def parse(text: str, name: str = "paper.toml") -> List[Figure]:
    """The figures of a paper.toml text; SchemaError names what does not fit."""
    if _toml is None:
        raise RuntimeError("fabkv.paper needs tomllib (Python 3.11) or the tomli package")
    try:
        doc = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise SchemaError(f"{name}: not TOML: {e}") from None
    unknown = sorted(set(doc) - {"figure"})
    if unknown:
        raise SchemaError(f"{name}: unknown top-level key(s) {', '.join(unknown)}")
    raw = doc.get("figure")
    if not isinstance(raw, list) or not raw:
        raise SchemaError(f"{name}: no [[figure]]")
    figures = [_figure(i, f) for i, f in enumerate(raw)]
    seen: Dict[str, int] = {}
    for i, f in enumerate(figures):
        if f.id in seen:
            raise SchemaError(f"{name}: id {f.id} twice (figures #{seen[f.id] + 1} and #{i + 1})")
        seen[f.id] = i
    return figures


def load(path: Optional[PathArg] = None) -> List[Figure]:
    """The figures of `path` (default: the paper.toml next to this file)."""
    p = pathlib.Path(path) if path is not None else PAPER_TOML
    return parse(p.read_text(encoding="utf-8"), str(p))


def by_id(id: str, figures: Optional[Sequence[Figure]] = None) -> Figure:
    """The figure `id` of `figures` (default: load()); KeyError when there is none."""
    for f in figures if figures is not None else load():
        if f.id == id:
            return f
    raise KeyError(f"no figure {id!r} in paper.toml")


def normalize(text: str) -> str:
    """Runs of whitespace (newlines included) collapsed to one space, ends stripped."""
    return re.sub(r"\s+", " ", text).strip()


def default_seeds() -> pathlib.Path:
    """$FABKV_SEEDS, else ../shared/seeds beside the checkout holding this file."""
    env = os.environ.get("FABKV_SEEDS")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "seeds"


def seed_text(seeds: PathArg, seed: str) -> str:
    """The text of seed `seed` ("000") in folder `seeds`, whitespace normalized."""
    found = sorted(pathlib.Path(seeds).glob(f"{seed}_*.txt"))
    if len(found) != 1:
        raise FileNotFoundError(f"{seeds}: {len(found)} files {seed}_*.txt, expected one")
    return normalize(found[0].read_text(encoding="utf-8"))


def check_quotes(figures: Sequence[Figure], seeds: PathArg) -> List[str]:
    """One message per point whose quote is not in its seed's text (empty: all found)."""
    texts: Dict[str, str] = {}
    errors = []
    for f in figures:
        if f.seed not in texts:
            texts[f.seed] = seed_text(seeds, f.seed)
        for i, p in enumerate(f.points):
            if normalize(p.quote) not in texts[f.seed]:
                errors.append(f"{f.id}, point #{i + 1} ({p.series}, x={p.x}): quote not in "
                              f"seed {f.seed}: {p.quote!r}")
    return errors


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m fabkv.paper",
                                 description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--file", help="a paper.toml (default: the one next to this file)")
    ap.add_argument("--seeds", help="check every quote against the seed texts in this folder "
                                    "(default when it exists: $FABKV_SEEDS or ../shared/seeds)")
    a = ap.parse_args(argv)
    try:
        figures = load(a.file)
    except (OSError, SchemaError) as e:
        print(f"fabkv.paper: {e}", file=sys.stderr)
        return 1
    for f in figures:
        print(f"{f.id:18} {f.paper:10} {f.ref:28} {len(f.points):2} points "
              f"{len(f.claims):2} claims  {f.title}")
    seeds = pathlib.Path(a.seeds) if a.seeds else default_seeds()
    if not seeds.is_dir():
        if a.seeds:
            print(f"fabkv.paper: {seeds}: no such folder", file=sys.stderr)
            return 1
        print(f"quotes not checked: no seeds at {seeds}")
        return 0
    try:
        errors = check_quotes(figures, seeds)
    except FileNotFoundError as e:
        print(f"fabkv.paper: {e}", file=sys.stderr)
        return 1
    for message in errors:
        print(message, file=sys.stderr)
    n = sum(len(f.points) for f in figures)
    print(f"quotes: {n - len(errors)} of {n} found in {seeds}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
