"""`puzzle.cube_rotation`: the colour of every face of a cube after a sequence of whole-cube rotations.

Each rotation is stated so that it has one meaning: a quarter turn names the face that moves and the place
it moves to (two adjacent faces fix the axis and the direction), a half turn names the two faces on its
axis. The answer gives all six faces (`top: red, bottom: blue, ...`), not one face: one face's colour is a
1-in-6 guess, the full orientation 1 in 720 for a random assignment of the colours (1 in 24 for a guess
among the cube's real orientations, still under the gate's 0.05). The checker replays the rotations from
the reference and compares all six faces. The generator redraws sequences that bring the cube back to its
start (an answer a trivial policy could copy).
"""

from __future__ import annotations

import random
import re
from typing import Literal

from pydantic import Field, model_validator

from proctor.environments.puzzles.answer import Checked
from proctor.environments.puzzles.base import (
    Puzzle,
    PuzzleConfig,
    PuzzleFamily,
    PuzzleReference,
    register_family,
)

FACES = ("top", "bottom", "front", "back", "left", "right")
OPPOSITE = {
    "top": "bottom",
    "bottom": "top",
    "front": "back",
    "back": "front",
    "left": "right",
    "right": "left",
}
SYNONYMS = {"up": "top", "down": "bottom", "rear": "back"}
COLOURS = (
    "red",
    "green",
    "blue",
    "yellow",
    "white",
    "orange",
    "purple",
    "pink",
    "brown",
    "gray",
    "black",
    "cyan",
)
MAX_MOVES = 50
_SEPARATORS = str.maketrans({":": " ", "=": " ", "-": " "})


class CubeConfig(PuzzleConfig):
    """How many rotations, and whether half turns appear."""

    min_moves: int = Field(default=3, ge=1, le=MAX_MOVES)
    max_moves: int = Field(default=5, ge=1, le=MAX_MOVES)
    half_turns: bool = True


class CubeReference(PuzzleReference):
    """The start colours (in FACES order) and the rotations: ('quarter', from, to) or ('half', axis, axis)."""

    colours: list[str] = Field(min_length=6, max_length=6)
    moves: list[tuple[Literal["quarter", "half"], str, str]] = Field(min_length=1, max_length=MAX_MOVES)

    @model_validator(mode="after")
    def _well_formed(self) -> CubeReference:
        if len(set(self.colours)) != 6 or any(colour not in COLOURS for colour in self.colours):
            raise ValueError(f"six distinct colours from {', '.join(COLOURS)}")
        for kind, a, b in self.moves:
            if a not in FACES or b not in FACES or a == b:
                raise ValueError("a move names two different faces")
            if (kind == "half") != (OPPOSITE[a] == b):
                raise ValueError("a quarter turn names adjacent faces, a half turn the two faces of its axis")
        return self


def rotate(cube: dict[str, str], kind: str, a: str, b: str) -> dict[str, str]:
    """The cube after one rotation (face -> colour)."""
    out = dict(cube)
    if kind == "quarter":  # a goes to b, b to opposite(a), opposite(a) to opposite(b), opposite(b) to a
        cycle = [a, b, OPPOSITE[a], OPPOSITE[b]]
        for here, there in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            out[there] = cube[here]
    else:  # a half turn about the a-b axis swaps the other two opposite pairs
        for face in FACES:
            if face not in (a, b):
                out[face] = cube[OPPOSITE[face]]
    return out


def final(reference: CubeReference) -> dict[str, str]:
    """The colour of every face after all the rotations."""
    cube = dict(zip(FACES, reference.colours, strict=True))
    for kind, a, b in reference.moves:
        cube = rotate(cube, kind, a, b)
    return cube


def say(kind: str, a: str, b: str) -> str:
    """A rotation in words."""
    if kind == "half":
        return f"Turn the cube half a turn about the axis through its {a} and {b} faces (those two stay in place)."
    still = [face for face in FACES if face not in (a, b, OPPOSITE[a], OPPOSITE[b])]
    return (
        f"Turn the cube a quarter turn so that the {a} face moves to where the {b} face was "
        f"(the {still[0]} and {still[1]} faces stay in place)."
    )


def parse_faces(answer: str) -> dict[str, str] | None:
    """`top: red, bottom: blue, ...` (all six faces once), or None when it has another shape."""
    parts = [part for part in re.split(r"[,;\n]", answer) if part.strip()]
    faces: dict[str, str] = {}
    for part in parts:
        words = part.translate(_SEPARATORS).lower().split()
        if len(words) == 3 and words[1] == "is":
            words = [words[0], words[2]]
        if len(words) != 2:
            return None
        face, colour = words
        face = SYNONYMS.get(face, face)
        if face not in FACES or face in faces:
            return None
        faces[face] = "gray" if colour == "grey" else colour
    return faces if len(faces) == 6 else None


class CubeRotation(PuzzleFamily[CubeConfig, CubeReference]):
    """Track a coloured cube through whole-cube rotations; answer all six faces."""

    name = "cube_rotation"
    version = "1"
    description = "Give the colour of all six faces of a cube after a sequence of rotations."
    Config = CubeConfig
    Reference = CubeReference
    levels = {
        "easy": {"min_moves": 1, "max_moves": 2, "half_turns": False},
        "medium": {"min_moves": 3, "max_moves": 5, "half_turns": True},
        "hard": {"min_moves": 6, "max_moves": 10, "half_turns": True},
    }
    max_answer_chars = 300

    def generate(self, rng: random.Random, config: CubeConfig) -> Puzzle[CubeReference]:
        """Random colours and rotations, redrawn while the cube ends as it started."""
        for _ in range(10_000):
            colours = rng.sample(COLOURS, 6)
            moves: list[tuple[Literal["quarter", "half"], str, str]] = []
            for _ in range(rng.randint(config.min_moves, max(config.min_moves, config.max_moves))):
                a = rng.choice(FACES)
                if config.half_turns and rng.random() < 0.25:
                    moves.append(("half", a, OPPOSITE[a]))
                else:
                    moves.append(("quarter", a, rng.choice([f for f in FACES if f not in (a, OPPOSITE[a])])))
            reference = CubeReference(colours=colours, moves=moves)
            end = final(reference)
            if [end[face] for face in FACES] == colours:
                continue
            start = ", ".join(f"{face} {colour}" for face, colour in zip(FACES, colours, strict=True))
            steps = "\n".join(f"{i}. {say(*move)}" for i, move in enumerate(moves, 1))
            question = (
                f"A cube has a different colour on each face: {start}. The faces are named by where they are "
                "(top, bottom, front, back, left, right, as seen by you in front of the cube), and the names "
                f"stay with the places, not the colours. The cube is turned, in order:\n\n{steps}\n\n"
                "What colour is now on each face? Answer with all six, as face: colour pairs separated by "
                "commas, e.g. top: red, bottom: blue, front: green, back: white, left: pink, right: black."
            )
            gold = ", ".join(f"{face}: {end[face]}" for face in FACES)
            return Puzzle(question, reference, gold, {"moves": len(moves)})
        raise RuntimeError("no rotation sequence that moves the cube")

    def check(self, answer: str, reference: CubeReference) -> Checked:
        """Valid when every face has the colour the rotations leave on it."""
        faces = parse_faces(answer)
        if faces is None:
            return Checked.malformed("malformed", expected="six face: colour pairs")
        end = final(reference)
        wrong = [face for face in FACES if faces[face] != end[face]]
        return Checked.right() if not wrong else Checked.wrong("wrong_faces", faces=wrong)

    def random_answer(self, rng: random.Random, reference: CubeReference) -> str:
        """The cube's six colours on the six faces in a random order."""
        colours = rng.sample(reference.colours, 6)
        return ", ".join(f"{face}: {colour}" for face, colour in zip(FACES, colours, strict=True))


register_family(CubeRotation)
