"""`puzzle.matrix`: exact matrix operations: product, determinant, transpose, inverse, and ranks.

Arithmetic is exact (integers and Fractions). Matrix answers are read as rows of numbers: `[[1, 2], [3, 4]]`,
`1 2; 3 4` (rows split by `;` or new lines), or LaTeX `\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}`;
entries are integers, `p/q`, `\\frac{p}{q}` or terminating decimals (`-4.0` is -4, exactly). The checker
verifies by the rules: a product or transpose is recomputed, an inverse X must satisfy A X = I, a
determinant is recomputed by exact elimination. A rank question asks for the ranks of several matrices at
once (a single rank is one of at most 5 values, which a guess would hit far too often).
"""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles._numbers import format_fraction, parse_fraction, parse_integer
from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

Kind = Literal["product", "determinant", "transpose", "inverse", "rank"]
KINDS: tuple[Kind, ...] = ("product", "determinant", "transpose", "inverse", "rank")
MAX_SIZE = 8
MAX_ENTRY = 10**6
MAX_RANK_MATRICES = 6
MIN_RANK_SIZE = 3

Matrix = list[list[int]]

_ROW = re.compile(r"\[([^\[\]]*)\]")
_LATEX_ENV = re.compile(r"\\(?:begin|end)\{[a-zA-Z]*matrix\*?\}")
_LATEX_FRAC = re.compile(r"(-?)\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(-?\d+)\s*\}", re.ASCII)
_PLAIN_INTEGER = re.compile(r"-?\d{1,30}", re.ASCII)
_ENTRY_SPLIT = re.compile(r"\s*,\s*|\s+")
_LIST_SPLIT = re.compile(r"\s*[,;]\s*|\s+")


class MatrixConfig(PuzzleConfig):
    """Difficulty knobs: matrix sizes, entry size, how many matrices a rank question has, kinds asked."""

    min_size: int = Field(default=3, ge=2, le=MAX_SIZE)
    max_size: int = Field(default=4, ge=2, le=MAX_SIZE)
    max_entry: int = Field(default=9, ge=2, le=100)
    rank_matrices: int = Field(default=4, ge=3, le=MAX_RANK_MATRICES)
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, max_length=5)

    @model_validator(mode="after")
    def _sizes(self) -> MatrixConfig:
        if self.min_size > self.max_size:
            raise ValueError("min_size must not exceed max_size")
        return self


class MatrixReference(PuzzleReference):
    """The operation and its operands: `a` (and `b` for a product), or `matrices` for ranks."""

    kind: Kind
    a: Matrix = Field(default_factory=list, max_length=MAX_SIZE)
    b: Matrix = Field(default_factory=list, max_length=MAX_SIZE)
    matrices: list[Matrix] = Field(default_factory=list, max_length=MAX_RANK_MATRICES)

    @model_validator(mode="after")
    def _shapes(self) -> MatrixReference:
        for m in [self.a, self.b, *self.matrices]:
            if m and (
                any(len(row) != len(m[0]) or not 1 <= len(row) <= MAX_SIZE for row in m)
                or any(abs(x) > MAX_ENTRY for row in m for x in row)
            ):
                raise ValueError("a matrix must be rectangular, at most 8x8, with entries of at most 10**6")
        if self.kind == "rank":
            if not self.matrices or not all(self.matrices):
                raise ValueError("rank needs matrices")
            return self
        if not self.a:
            raise ValueError("a is required")
        if self.kind == "product" and (not self.b or len(self.a[0]) != len(self.b)):
            raise ValueError("a product needs b with as many rows as a has columns")
        if self.kind in ("determinant", "inverse") and len(self.a) != len(self.a[0]):
            raise ValueError("determinant and inverse need a square matrix")
        if self.kind == "inverse" and determinant(self.a) == 0:
            raise ValueError("the matrix is singular")
        return self


def multiply(a: list[list], b: list[list]) -> list[list]:
    """The matrix product a*b (exact)."""
    columns = list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]


def transpose(a: list[list]) -> list[list]:
    """Rows become columns."""
    return [list(col) for col in zip(*a, strict=True)]


def _bareiss(a: list[list[int]]) -> tuple[int, int]:
    """(rank, determinant if square else 0) by fraction-free (Bareiss) elimination on integers.

    Every intermediate entry is a minor of the matrix, so each division is exact (also when a column has
    no pivot and is skipped).
    """
    rows = [list(row) for row in a]
    n_rows, n_cols = len(rows), len(rows[0])
    rank, sign, previous = 0, 1, 1
    for col in range(n_cols):
        pivot = next((r for r in range(rank, n_rows) if rows[r][col] != 0), None)
        if pivot is None:
            continue
        if pivot != rank:
            rows[rank], rows[pivot] = rows[pivot], rows[rank]
            sign = -sign
        top = rows[rank]
        lead = top[col]
        for r in range(rank + 1, n_rows):
            row = rows[r]
            below = row[col]
            rows[r] = [0] * (col + 1) + [
                (row[j] * lead - below * top[j]) // previous for j in range(col + 1, n_cols)
            ]
        previous = lead
        rank += 1
        if rank == n_rows:
            break
    square_full = rank == n_rows == n_cols
    return rank, sign * rows[n_rows - 1][n_cols - 1] if square_full else 0


def rank(a: list[list[int]]) -> int:
    """The rank of an integer matrix (exact)."""
    return _bareiss(a)[0]


def determinant(a: list[list[int]]) -> int:
    """The determinant of a square integer matrix (exact)."""
    return _bareiss(a)[1]


def inverse(a: list[list]) -> list[list[Fraction]]:
    """The inverse of a nonsingular square matrix, by Gauss-Jordan elimination over the rationals."""
    n = len(a)
    rows = [[Fraction(x) for x in row] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [x / lead for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [row[n:] for row in rows]


def is_inverse(a: list[list[int]], x: list[list[int | Fraction]]) -> bool:
    """Whether a*x is the identity, computed on integers: x scaled by the lcm of its denominators."""
    scale = math.lcm(*(v.denominator for row in x for v in row if isinstance(v, Fraction)))
    scaled = [
        [v * scale if isinstance(v, int) else v.numerator * (scale // v.denominator) for v in row]
        for row in x
    ]
    product = multiply(a, scaled)
    n = len(a)
    return all(product[i][j] == (scale if i == j else 0) for i in range(n) for j in range(n))


def format_matrix(m: list[list]) -> str:
    """'[[1, 2], [3, -1/2]]'."""
    return (
        "[" + ", ".join("[" + ", ".join(format_fraction(Fraction(x)) for x in row) + "]" for row in m) + "]"
    )


def _rows_text(text: str) -> list[str] | None:
    text = _LATEX_FRAC.sub(lambda m: f"{m.group(1)}{m.group(2)}/{m.group(3)}", text)
    if "\\begin" in text:
        body = _LATEX_ENV.sub(" ", text)
        if "\\" in body.replace("\\\\", ""):
            return None
        return [row.replace("&", " ") for row in body.split("\\\\") if row.strip()]
    if "[" in text:
        rows = _ROW.findall(text)
        rest = _ROW.sub("", text)
        if not rows or rest.strip(" \n\t[],") != "":
            return None
        return rows
    return [row for row in re.split(r"[;\n]", text) if row.strip()]


def parse_matrix(text: str) -> list[list[int | Fraction]] | None:
    """A rectangular matrix of exact numbers in one of the accepted layouts (see the module doc), or None."""
    rows_text = _rows_text(text.strip())
    if not rows_text or len(rows_text) > MAX_SIZE:
        return None
    rows: list[list[int | Fraction]] = []
    for row_text in rows_text:
        cells = [c for c in _ENTRY_SPLIT.split(row_text.strip()) if c]
        if not cells or len(cells) > MAX_SIZE:
            return None
        values = [int(c) if _PLAIN_INTEGER.fullmatch(c) else parse_fraction(c) for c in cells]
        if any(v is None for v in values):
            return None
        rows.append(values)  # type: ignore[arg-type]
    if any(len(row) != len(rows[0]) for row in rows):
        return None
    return rows


def show(m: Matrix) -> str:
    """One row per line, as [a, b, c]."""
    return "\n".join("[" + ", ".join(str(x) for x in row) + "]" for row in m)


def random_matrix(rng: random.Random, rows: int, cols: int, bound: int) -> Matrix:
    """Entries uniform in [-bound, bound]."""
    return [[rng.randint(-bound, bound) for _ in range(cols)] for _ in range(rows)]


def matrix_of_rank(rng: random.Random, rows: int, cols: int, target: int, bound: int) -> Matrix:
    """A sum of `target` random rank-one integer matrices (its rank is at most target; measured after)."""
    m = [[0] * cols for _ in range(rows)]
    small = max(1, min(3, bound))
    for _ in range(target):
        u = [rng.randint(-small, small) for _ in range(rows)]
        v = [rng.randint(-small, small) for _ in range(cols)]
        m = [[m[i][j] + u[i] * v[j] for j in range(cols)] for i in range(rows)]
    return m


_MATRIX_FORMAT = "Answer with the matrix as a list of rows, like [[1, 2], [3, 4]]"


class MatrixOps(PuzzleFamily[MatrixConfig, MatrixReference]):
    """Exact matrix operations."""

    name = "matrix"
    description = (
        "Matrix operations with exact integers and fractions: product, determinant, transpose, inverse, rank."
    )
    Config = MatrixConfig
    Reference = MatrixReference
    max_answer_chars = 1500
    levels = {
        "easy": {"min_size": 2, "max_size": 3, "max_entry": 5, "rank_matrices": 4},
        "medium": {"min_size": 3, "max_size": 4, "max_entry": 9, "rank_matrices": 4},
        "hard": {"min_size": 4, "max_size": 5, "max_entry": 20, "rank_matrices": 5},
    }

    def generate(self, rng: random.Random, config: MatrixConfig) -> Puzzle[MatrixReference]:
        """Pick a kind and draw its matrices."""
        kind = rng.choice(config.kinds)
        bound = config.max_entry

        def size() -> int:
            return rng.randint(config.min_size, config.max_size)

        if kind == "product":
            n, k, p = size(), size(), size()
            a, b = random_matrix(rng, n, k, bound), random_matrix(rng, k, p, bound)
            reference = MatrixReference(kind=kind, a=a, b=b)
            question = f"Compute the product A*B of\nA =\n{show(a)}\nand\nB =\n{show(b)}\n{_MATRIX_FORMAT}."
            gold = format_matrix(multiply(a, b))
        elif kind == "transpose":
            n, p = size(), size() + 1
            a = random_matrix(rng, n, p, bound)
            reference = MatrixReference(kind=kind, a=a)
            question = f"Give the transpose of\nA =\n{show(a)}\n{_MATRIX_FORMAT}."
            gold = format_matrix(transpose(a))
        elif kind == "determinant":
            n = size()
            a = random_matrix(rng, n, n, bound)
            reference = MatrixReference(kind=kind, a=a)
            question = f"Compute the determinant of\nA =\n{show(a)}\nAnswer with an integer."
            gold = str(determinant(a))
        elif kind == "inverse":
            n = size()
            a = random_matrix(rng, n, n, bound)
            while determinant(a) == 0:
                a = random_matrix(rng, n, n, bound)
            reference = MatrixReference(kind=kind, a=a)
            question = (
                f"Compute the inverse of\nA =\n{show(a)}\n{_MATRIX_FORMAT}; write non-integer entries as "
                "exact fractions like -3/7."
            )
            gold = format_matrix(inverse(a))
        else:
            matrices = []
            for _ in range(config.rank_matrices):
                rows, cols = max(MIN_RANK_SIZE, size()), max(MIN_RANK_SIZE, size())
                target = rng.randint(1, min(rows, cols))
                matrices.append(matrix_of_rank(rng, rows, cols, target, bound))
            reference = MatrixReference(kind=kind, matrices=matrices)
            listing = "\n\n".join(f"M{i + 1} =\n{show(m)}" for i, m in enumerate(matrices))
            question = (
                f"Give the rank of each of these {len(matrices)} matrices:\n{listing}\n\nAnswer with the ranks "
                "in order, separated by commas, like 1, 2, 3, 2."
            )
            gold = ", ".join(str(rank(m)) for m in matrices)
        measure = {"kind": kind, "size": len(reference.a) if reference.a else len(reference.matrices[0])}
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: MatrixReference) -> Checked:
        """Verify by the rules of the operation (see the module doc)."""
        kind = reference.kind
        if kind == "rank":
            parts = [p for p in _LIST_SPLIT.split(answer.strip()) if p]
            values = [parse_integer(p) for p in parts]
            if len(values) != len(reference.matrices) or any(v is None for v in values):
                return Checked.malformed("not_ranks")
            for value, m in zip(values, reference.matrices, strict=True):
                if value != rank(m):
                    return Checked.wrong("wrong_rank")
            return Checked.right()
        if kind == "determinant":
            value = parse_fraction(answer)
            if value is None:
                return Checked.malformed("not_a_number")
            return (
                Checked.right() if value == determinant(reference.a) else Checked.wrong("wrong_determinant")
            )
        given = parse_matrix(answer)
        if given is None:
            return Checked.malformed("not_a_matrix")
        if kind == "inverse":
            n = len(reference.a)
            if len(given) != n or len(given[0]) != n:
                return Checked.wrong("wrong_shape")
            return Checked.right() if is_inverse(reference.a, given) else Checked.wrong("not_inverse")
        expected = multiply(reference.a, reference.b) if kind == "product" else transpose(reference.a)
        if len(given) != len(expected) or len(given[0]) != len(expected[0]):
            return Checked.wrong("wrong_shape")
        return Checked.right() if given == expected else Checked.wrong("wrong_entries")

    def random_answer(self, rng: random.Random, reference: MatrixReference) -> str:
        """Random values of the right shape and size."""
        kind = reference.kind
        if kind == "rank":
            return ", ".join(str(rng.randint(1, min(len(m), len(m[0])))) for m in reference.matrices)
        bound = max(abs(x) for row in reference.a for x in row) or 1
        if kind == "determinant":
            n = len(reference.a)
            return str(rng.randint(-(bound**n), bound**n))
        if kind == "product":
            shape = (len(reference.a), len(reference.b[0]))
            scale = bound * max(abs(x) for row in reference.b for x in row) * len(reference.b)
        elif kind == "transpose":
            shape, scale = (len(reference.a[0]), len(reference.a)), bound
        else:
            shape, scale = (len(reference.a), len(reference.a)), 1
        return format_matrix([[rng.randint(-scale, scale) for _ in range(shape[1])] for _ in range(shape[0])])


register_family(MatrixOps)
