"""`puzzle.shortest_path`: a shortest path in a weighted undirected graph; any shortest path scores 1.

The checker walks the answered path over the graph's edges and compares its length with the distance it
computes itself (Dijkstra), so every one of several equally short paths is accepted.

The generator redraws the endpoints (and then the graph) while a random self-avoiding walk that reaches the
goal is a shortest path more than 2% of the time (GUESS_TRIALS simulated walks): otherwise wandering,
with no weights read, earns reward. Every loop is bounded, so a config that cannot be met is an error.
"""

from __future__ import annotations

import heapq
import random
import re

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

MAX_NODES = 60
MAX_EDGES = 400
GUESS_TRIALS = 100
GUESS_RATE = 0.02
"""Endpoints are redrawn while more than this share of random walks reaching the goal are shortest."""
PAIR_TRIES = 50
GRAPH_TRIES = 200
_STEP = re.compile(r"\s*(?:->|→|,|\s)\s*")


class PathConfig(PuzzleConfig):
    """Graph size, extra edges beyond a spanning tree, and weights."""

    min_nodes: int = Field(default=10, ge=3, le=MAX_NODES)
    max_nodes: int = Field(default=14, ge=3, le=MAX_NODES)
    extra_edges: float = Field(default=1.0, ge=0, le=5, description="Extra edges per node beyond a tree.")
    max_weight: int = Field(default=9, ge=1, le=99)


class PathReference(PuzzleReference):
    """Nodes 0..n-1, weighted undirected edges (a, b, w), the start and the goal."""

    nodes: int = Field(ge=2, le=MAX_NODES)
    edges: list[tuple[int, int, int]] = Field(min_length=1, max_length=MAX_EDGES)
    start: int = Field(ge=0)
    goal: int = Field(ge=0)

    @model_validator(mode="after")
    def _inside(self) -> PathReference:
        n = self.nodes
        if not (self.start < n and self.goal < n) or self.start == self.goal:
            raise ValueError("start and goal must be two different nodes")
        if any(not (0 <= a < n and 0 <= b < n and a != b and 1 <= w <= 1000) for a, b, w in self.edges):
            raise ValueError("edges join two different nodes with a weight in 1..1000")
        return self


def adjacency(reference: PathReference) -> dict[tuple[int, int], int]:
    """(a, b) -> lightest weight, both directions."""
    weights: dict[tuple[int, int], int] = {}
    for a, b, w in reference.edges:
        for pair in ((a, b), (b, a)):
            weights[pair] = min(w, weights.get(pair, w))
    return weights


def dijkstra(
    reference: PathReference, weights: dict[tuple[int, int], int] | None = None
) -> tuple[int | None, list[int]]:
    """The distance from start to goal (None when unreachable) and one shortest path."""
    neighbours: list[list[tuple[int, int]]] = [[] for _ in range(reference.nodes)]
    for (a, b), w in sorted((weights or adjacency(reference)).items()):
        neighbours[a].append((b, w))
    best = {reference.start: 0}
    previous: dict[int, int] = {}
    queue = [(0, reference.start)]
    while queue:
        distance, node = heapq.heappop(queue)
        if distance > best.get(node, distance):
            continue
        if node == reference.goal:
            path = [node]
            while path[-1] != reference.start:
                path.append(previous[path[-1]])
            return distance, path[::-1]
        for other, w in neighbours[node]:
            if distance + w < best.get(other, distance + w + 1):
                best[other] = distance + w
                previous[other] = node
                heapq.heappush(queue, (distance + w, other))
    return None, []


def random_walk(rng: random.Random, neighbours: list[list[int]], start: int, goal: int) -> list[int] | None:
    """A self-avoiding walk from start taking random unvisited neighbours; None when it gets stuck."""
    path, seen = [start], {start}
    while path[-1] != goal:
        options = [node for node in neighbours[path[-1]] if node not in seen]
        if not options:
            return None
        path.append(rng.choice(options))
        seen.add(path[-1])
    return path


def neighbour_lists(reference: PathReference) -> list[list[int]]:
    """Each node's neighbours, sorted (an order that is the same in every process)."""
    neighbours: list[set[int]] = [set() for _ in range(reference.nodes)]
    for a, b, _ in reference.edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    return [sorted(found) for found in neighbours]


def guessable(rng: random.Random, reference: PathReference, distance: int) -> bool:
    """Whether random walks that reach the goal are shortest paths more than GUESS_RATE of the time."""
    weights = adjacency(reference)
    neighbours = neighbour_lists(reference)
    reached = hits = 0
    for _ in range(GUESS_TRIALS * 3):  # until GUESS_TRIALS walks arrive: the policy retries stuck walks
        if reached == GUESS_TRIALS:
            break
        walk = random_walk(rng, neighbours, reference.start, reference.goal)
        if walk is not None:
            reached += 1
            hits += sum(weights[pair] for pair in zip(walk, walk[1:], strict=False)) == distance
    return hits > GUESS_RATE * max(reached, GUESS_TRIALS // 2)


def parse_path(answer: str) -> list[int] | None:
    """Node numbers separated by '->', commas or spaces; None when anything else is there."""
    parts = [part for part in _STEP.split(answer.strip()) if part]
    if (
        not parts
        or len(parts) > 2 * MAX_NODES
        or not all(p.isascii() and p.isdigit() and len(p) <= 3 for p in parts)
    ):
        return None
    return [int(part) for part in parts]


class ShortestPath(PuzzleFamily[PathConfig, PathReference]):
    """Find a shortest path between two nodes."""

    name = "shortest_path"
    version = "2"
    description = "Give a shortest path between two nodes of a weighted graph; any shortest path scores 1."
    Config = PathConfig
    Reference = PathReference
    levels = {
        "easy": {"min_nodes": 6, "max_nodes": 8, "extra_edges": 0.8},
        "medium": {"min_nodes": 10, "max_nodes": 14, "extra_edges": 1.0},
        "hard": {"min_nodes": 20, "max_nodes": 30, "extra_edges": 1.5},
    }
    max_answer_chars = 600

    def generate(self, rng: random.Random, config: PathConfig) -> Puzzle[PathReference]:
        """A random tree plus extra edges; endpoints two or more hops apart that random walks rarely solve."""
        for _ in range(GRAPH_TRIES):
            n = rng.randint(config.min_nodes, max(config.min_nodes, config.max_nodes))
            order = list(range(n))
            rng.shuffle(order)
            pairs = {tuple(sorted((order[i], order[rng.randrange(i)]))) for i in range(1, n)}
            target = len(pairs) + round(config.extra_edges * n)
            while len(pairs) < min(target, n * (n - 1) // 2):
                a, b = rng.sample(range(n), 2)
                pairs.add((min(a, b), max(a, b)))
            edges = [(a, b, rng.randint(1, config.max_weight)) for a, b in sorted(pairs)]
            for _ in range(PAIR_TRIES):
                start, goal = rng.sample(range(n), 2)
                reference = PathReference(nodes=n, edges=edges, start=start, goal=goal)
                distance, path = dijkstra(reference)
                if distance is not None and len(path) >= 3 and not guessable(rng, reference, distance):
                    return self._puzzle(reference, edges, distance, path)
        raise RuntimeError("no endpoints two hops apart that random walks rarely solve; add nodes or weights")

    def _puzzle(
        self, reference: PathReference, edges: list[tuple[int, int, int]], distance: int, path: list[int]
    ) -> Puzzle[PathReference]:
        n, start, goal = reference.nodes, reference.start, reference.goal
        listed = ", ".join(f"{a}-{b} ({w})" for a, b, w in edges)
        question = (
            f"An undirected graph has nodes 0 to {n - 1} and these edges, with their lengths in parentheses: "
            f"{listed}.\nFind a shortest path from node {start} to node {goal}. Answer with the nodes of the "
            f"path in order, separated by ' -> ', starting with {start} and ending with {goal}."
        )
        gold = " -> ".join(str(node) for node in path)
        return Puzzle(
            question,
            reference,
            gold,
            {"nodes": n, "edges": len(edges), "hops": len(path) - 1, "distance": distance},
        )

    def check(self, answer: str, reference: PathReference) -> Checked:
        """Starts at start, ends at goal, follows edges, and is as short as the shortest path."""
        path = parse_path(answer)
        if path is None:
            return Checked.malformed("malformed", expected="node numbers separated by ' -> '")
        if path[0] != reference.start or path[-1] != reference.goal:
            return Checked.wrong("wrong_endpoints")
        weights = adjacency(reference)
        length = 0
        for a, b in zip(path, path[1:], strict=False):
            weight = weights.get((a, b))
            if weight is None:
                return Checked.wrong("no_such_edge", edge=[a, b])
            length += weight
        distance, _ = dijkstra(reference, weights)
        if length != distance:
            return Checked.wrong("not_shortest", length=length, shortest=distance)
        return Checked.right()

    def random_answer(self, rng: random.Random, reference: PathReference) -> str:
        """A random self-avoiding walk from start to goal (redrawn while it gets stuck), else start -> goal."""
        neighbours = neighbour_lists(reference)
        for _ in range(20):
            walk = random_walk(rng, neighbours, reference.start, reference.goal)
            if walk is not None:
                return " -> ".join(map(str, walk))
        return f"{reference.start} -> {reference.goal}"


register_family(ShortestPath)
