"""`puzzle.graph_coloring`: colour a graph's vertices with at most k colours; any proper colouring scores 1.

The generator plants a k-colouring (so one exists) and only adds edges between differently coloured
vertices; the checker accepts every proper colouring, not only the planted one.
"""

from __future__ import annotations

import random

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_VERTICES = 60
MAX_EDGES = 600


class ColoringConfig(PuzzleConfig):
    """Graph size, colours and edge density."""

    min_vertices: int = Field(default=10, ge=3, le=MAX_VERTICES)
    max_vertices: int = Field(default=14, ge=3, le=MAX_VERTICES)
    colors: int = Field(default=3, ge=2, le=9)
    edge_probability: float = Field(
        default=0.45, gt=0, le=1, description="Of each differently coloured pair."
    )


class ColoringReference(PuzzleReference):
    """Vertices 0..n-1, undirected edges, and the number of colours allowed (1..k)."""

    vertices: int = Field(ge=2, le=MAX_VERTICES)
    colors: int = Field(ge=2, le=9)
    edges: list[tuple[int, int]] = Field(min_length=1, max_length=MAX_EDGES)

    @model_validator(mode="after")
    def _inside(self) -> ColoringReference:
        if any(not (0 <= a < self.vertices and 0 <= b < self.vertices) or a == b for a, b in self.edges):
            raise ValueError("edges must join two different vertices of the graph")
        return self


def parse_colors(answer: str, n: int, k: int) -> list[int] | None:
    """n colours (1..k) separated by commas or spaces, vertex 0 first; None when the shape is wrong."""
    parts = answer.replace(",", " ").split()
    if len(parts) != n or not all(part.isascii() and part.isdigit() and len(part) == 1 for part in parts):
        return None
    return [int(part) for part in parts]


class GraphColoring(PuzzleFamily[ColoringConfig, ColoringReference]):
    """Proper vertex colouring with k colours."""

    name = "graph_coloring"
    version = "1"
    description = "Colour the graph's vertices with colours 1..k so no edge joins two equal colours."
    Config = ColoringConfig
    Reference = ColoringReference
    levels = {
        "easy": {"min_vertices": 6, "max_vertices": 8, "colors": 3, "edge_probability": 0.5},
        "medium": {"min_vertices": 10, "max_vertices": 14, "colors": 3, "edge_probability": 0.45},
        "hard": {"min_vertices": 18, "max_vertices": 24, "colors": 4, "edge_probability": 0.4},
    }
    max_answer_chars = 400

    def generate(self, rng: random.Random, config: ColoringConfig) -> Puzzle[ColoringReference]:
        """Plant a colouring using every colour, then add edges across colour classes."""
        n = rng.randint(config.min_vertices, max(config.min_vertices, config.max_vertices))
        k = min(config.colors, n)
        while True:
            planted = [rng.randint(1, k) for _ in range(n)]
            if len(set(planted)) == k:
                break
        edges = [
            (a, b)
            for a in range(n)
            for b in range(a + 1, n)
            if planted[a] != planted[b] and rng.random() < config.edge_probability
        ]
        if not edges:
            a, b = next((a, b) for a in range(n) for b in range(n) if planted[a] != planted[b])
            edges = [(min(a, b), max(a, b))]
        reference = ColoringReference(vertices=n, colors=k, edges=edges)
        listed = ", ".join(f"{a}-{b}" for a, b in edges)
        question = (
            f"A graph has vertices 0 to {n - 1} and these edges: {listed}.\n"
            f"Colour every vertex with one of the colours 1 to {k} so that no edge joins two vertices of the "
            f"same colour. Answer with the {n} colours in vertex order (vertex 0 first), separated by commas."
        )
        gold = ",".join(str(color) for color in planted)
        return Puzzle(question, reference, gold, {"vertices": n, "edges": len(edges), "colors": k})

    def check(self, answer: str, reference: ColoringReference) -> Checked:
        """Every colour in 1..k and no edge monochromatic."""
        colors = parse_colors(answer, reference.vertices, reference.colors)
        if colors is None:
            return Checked.malformed("malformed", expected=f"{reference.vertices} colours")
        if any(not 1 <= color <= reference.colors for color in colors):
            return Checked.wrong("color_out_of_range")
        for a, b in reference.edges:
            if colors[a] == colors[b]:
                return Checked.wrong("conflict", edge=[a, b])
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: ColoringReference) -> str:
        """Random colours."""
        return ",".join(str(rng.randint(1, reference.colors)) for _ in range(reference.vertices))


register_family(GraphColoring)
