"""`puzzle.cipher`: Caesar and Vigenère ciphers: encrypt, decrypt with a key, or crack a Caesar shift.

Texts are English words (from the list below) in capitals separated by single spaces; the ciphers shift
letters only and leave spaces alone, and the Vigenère key advances on letters only. Answers are compared
after upper-casing and collapsing runs of blanks; every letter and every word break must be right. The
checker applies the rule, not a stored string: a decryption is right when encrypting it gives the
ciphertext; a cracked Caesar text is right when it is a shift of the ciphertext made only of words from the
list, and the generator proves that exactly one of the 26 shifts is.
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

Kind = Literal["caesar_encrypt", "caesar_decrypt", "vigenere_encrypt", "vigenere_decrypt", "caesar_crack"]
KINDS: tuple[Kind, ...] = (
    "caesar_encrypt",
    "caesar_decrypt",
    "vigenere_encrypt",
    "vigenere_decrypt",
    "caesar_crack",
)
MAX_WORDS = 30
MAX_TEXT = 400

WORDS = tuple(
    [
        "about",
        "above",
        "across",
        "after",
        "again",
        "against",
        "almost",
        "along",
        "always",
        "among",
        "animal",
        "answer",
        "apple",
        "around",
        "autumn",
        "basket",
        "beach",
        "before",
        "begin",
        "behind",
        "below",
        "better",
        "between",
        "bird",
        "black",
        "blue",
        "boat",
        "body",
        "book",
        "bottle",
        "bread",
        "bridge",
        "bright",
        "brother",
        "brown",
        "build",
        "butter",
        "button",
        "cabin",
        "candle",
        "carpet",
        "castle",
        "cattle",
        "center",
        "chair",
        "cheese",
        "child",
        "circle",
        "city",
        "clean",
        "clever",
        "cloud",
        "coast",
        "coffee",
        "cold",
        "color",
        "corner",
        "cotton",
        "country",
        "cover",
        "crowd",
        "dance",
        "dark",
        "daughter",
        "desert",
        "dinner",
        "doctor",
        "door",
        "dream",
        "drink",
        "early",
        "earth",
        "east",
        "easy",
        "engine",
        "evening",
        "family",
        "farm",
        "father",
        "field",
        "finger",
        "fire",
        "fish",
        "flower",
        "forest",
        "friend",
        "garden",
        "gentle",
        "glass",
        "gold",
        "grass",
        "great",
        "green",
        "ground",
        "happy",
        "harbor",
        "heart",
        "heavy",
        "hidden",
        "hill",
        "horse",
        "house",
        "hunter",
        "island",
        "jacket",
        "journey",
        "jungle",
        "kettle",
        "king",
        "kitchen",
        "ladder",
        "lake",
        "lamp",
        "large",
        "laugh",
        "leaf",
        "lemon",
        "letter",
        "light",
        "lion",
        "little",
        "market",
        "meadow",
        "middle",
        "milk",
        "mirror",
        "money",
        "monkey",
        "morning",
        "mother",
        "mountain",
        "music",
        "narrow",
        "nature",
        "needle",
        "night",
        "north",
        "number",
        "ocean",
        "orange",
        "paper",
        "parrot",
        "pencil",
        "people",
        "pepper",
        "picture",
        "pillow",
        "planet",
        "pocket",
        "pond",
        "potato",
        "quiet",
        "rabbit",
        "rain",
        "river",
        "road",
        "rocket",
        "round",
        "salt",
        "sand",
        "school",
        "season",
        "secret",
        "shadow",
        "silver",
        "simple",
        "sister",
        "small",
        "smile",
        "snow",
        "soft",
        "south",
        "spring",
        "square",
        "station",
        "stone",
        "storm",
        "street",
        "summer",
        "sunset",
        "table",
        "teacher",
        "thunder",
        "ticket",
        "tiger",
        "timber",
        "tower",
        "town",
        "train",
        "travel",
        "tree",
        "turtle",
        "valley",
        "village",
        "violin",
        "voice",
        "wagon",
        "walnut",
        "water",
        "west",
        "wheel",
        "white",
        "window",
        "winter",
        "wolf",
        "wonder",
        "wood",
        "yellow",
        "young",
    ]
)
WORD_SET = frozenset(w.upper() for w in WORDS)
_BLANKS = re.compile(r"\s+")
_LETTERS = re.compile(r"[A-Z ]+")


class CipherConfig(PuzzleConfig):
    """Difficulty knobs: text length, Vigenère key length, and the kinds of task."""

    min_words: int = Field(default=4, ge=1, le=MAX_WORDS)
    max_words: int = Field(default=7, ge=1, le=MAX_WORDS)
    min_key: int = Field(default=4, ge=2, le=12)
    max_key: int = Field(default=6, ge=2, le=12)
    kinds: list[Kind] = Field(default=list(KINDS), min_length=1, max_length=5)

    @model_validator(mode="after")
    def _ranges(self) -> CipherConfig:
        if self.min_words > self.max_words or self.min_key > self.max_key:
            raise ValueError("min_words/min_key must not exceed max_words/max_key")
        return self


class CipherReference(PuzzleReference):
    """The task, the given text (plaintext to encrypt, or ciphertext), and the key (shift or keyword)."""

    kind: Kind
    text: str = Field(min_length=1, max_length=MAX_TEXT, pattern=r"^[A-Z]+( [A-Z]+)*$")
    shift: int = Field(default=0, ge=0, le=25)
    key: str = Field(default="", max_length=12, pattern=r"^[A-Z]*$")

    @model_validator(mode="after")
    def _has_key(self) -> CipherReference:
        if self.kind.startswith("vigenere") and not self.key:
            raise ValueError("a Vigenère task needs its key")
        return self


def caesar(text: str, shift: int) -> str:
    """Shift every capital letter by `shift` places (blanks unchanged)."""
    return "".join(chr((ord(c) - 65 + shift) % 26 + 65) if "A" <= c <= "Z" else c for c in text)


def vigenere(text: str, key: str, sign: int = 1) -> str:
    """Vigenère with a capital-letter key (sign -1 decrypts); the key advances on letters only."""
    out, k = [], 0
    for c in text:
        if "A" <= c <= "Z":
            out.append(chr((ord(c) - 65 + sign * (ord(key[k % len(key)]) - 65)) % 26 + 65))
            k += 1
        else:
            out.append(c)
    return "".join(out)


def normalize(answer: str) -> str | None:
    """Upper-cased with blank runs collapsed; None unless only letters and blanks remain."""
    text = _BLANKS.sub(" ", answer.strip().upper())
    return text if text and _LETTERS.fullmatch(text) else None


def all_words(text: str) -> bool:
    """Whether every word of the text is in the word list."""
    return all(word in WORD_SET for word in text.split(" "))


def english_shifts(ciphertext: str) -> list[int]:
    """The shifts that decrypt the ciphertext to words of the list only."""
    return [s for s in range(26) if all_words(caesar(ciphertext, -s))]


class Cipher(PuzzleFamily[CipherConfig, CipherReference]):
    """Caesar and Vigenère ciphers."""

    name = "cipher"
    description = "Caesar and Vigenère ciphers: encrypt, decrypt with a key, or crack a Caesar shift."
    Config = CipherConfig
    Reference = CipherReference
    max_answer_chars = 600
    levels = {
        "easy": {
            "min_words": 2,
            "max_words": 4,
            "min_key": 3,
            "max_key": 4,
            "kinds": ["caesar_encrypt", "caesar_decrypt", "vigenere_encrypt", "vigenere_decrypt"],
        },
        "medium": {"min_words": 4, "max_words": 7, "min_key": 4, "max_key": 6},
        "hard": {"min_words": 8, "max_words": 14, "min_key": 6, "max_key": 10},
    }

    def generate(self, rng: random.Random, config: CipherConfig) -> Puzzle[CipherReference]:
        """Draw words, a kind and a key; a crack task is redrawn until exactly one shift reads as words."""
        kind = rng.choice(config.kinds)
        while True:
            plain = " ".join(
                w.upper() for w in rng.choices(WORDS, k=rng.randint(config.min_words, config.max_words))
            )
            if len(plain) <= MAX_TEXT:
                break
        shift = rng.randint(1, 25)
        key = "".join(chr(65 + rng.randrange(26)) for _ in range(rng.randint(config.min_key, config.max_key)))
        if kind == "caesar_crack":
            while english_shifts(caesar(plain, shift)) != [shift]:
                plain = " ".join(w.upper() for w in rng.choices(WORDS, k=max(2, config.min_words)))
            text, gold = caesar(plain, shift), plain
            question = (
                f"This text was encrypted with a Caesar cipher (every letter shifted forward by the same unknown "
                f"number of places in the alphabet, wrapping from Z to A; spaces unchanged):\n{text}\n"
                "The plaintext is made of common English words. Give the plaintext."
            )
            reference = CipherReference(kind=kind, text=text)
        elif kind.startswith("caesar"):
            encrypt = kind == "caesar_encrypt"
            text = plain if encrypt else caesar(plain, shift)
            gold = caesar(plain, shift) if encrypt else plain
            verb = "Encrypt" if encrypt else "Decrypt"
            question = (
                f"{verb} this text with a Caesar cipher of shift {shift} (encryption moves each letter {shift} "
                f"places forward in the alphabet, wrapping from Z to A; spaces stay unchanged):\n{text}\n"
                f"Give the {'ciphertext' if encrypt else 'plaintext'} in capital letters."
            )
            reference = CipherReference(kind=kind, text=text, shift=shift)
        else:
            encrypt = kind == "vigenere_encrypt"
            cipher = vigenere(plain, key)
            text, gold = (plain, cipher) if encrypt else (cipher, plain)
            verb = "Encrypt" if encrypt else "Decrypt"
            question = (
                f"{verb} this text with the Vigenère cipher and the key {key}:\n{text}\n"
                "Encryption shifts each letter forward by the key letter under it (A = 0, B = 1, ..., Z = 25), "
                "wrapping from Z to A; the key repeats and advances on letters only (spaces are kept and use "
                f"no key letter). Give the {'ciphertext' if encrypt else 'plaintext'} in capital letters."
            )
            reference = CipherReference(kind=kind, text=text, key=key)
        measure = {
            "kind": kind,
            "letters": sum(c != " " for c in plain),
            "key_length": len(key) if kind.startswith("vig") else 1,
        }
        return Puzzle(question=question, reference=reference, gold=gold, measure=measure)

    def check(self, answer: str, reference: CipherReference) -> Checked:
        """Apply the cipher's rule to the answer (see the module doc)."""
        text = normalize(answer)
        if text is None:
            return Checked.malformed("not_capital_words")
        kind = reference.kind
        if len(text) != len(reference.text):
            return Checked.wrong("wrong_length")
        if kind == "caesar_crack":
            shift = (ord(reference.text[0]) - ord(text[0])) % 26
            if caesar(text, shift) != reference.text:
                return Checked.wrong("not_a_shift")
            return Checked.right() if all_words(text) else Checked.wrong("not_words")
        if kind == "caesar_encrypt":
            ok = text == caesar(reference.text, reference.shift)
        elif kind == "caesar_decrypt":
            ok = caesar(text, reference.shift) == reference.text
        elif kind == "vigenere_encrypt":
            ok = text == vigenere(reference.text, reference.key)
        else:
            ok = vigenere(text, reference.key) == reference.text
        return Checked.right() if ok else Checked.wrong("wrong_text")

    def random_answer(self, rng: random.Random, reference: CipherReference) -> str:
        """Random capital letters with the text's word lengths."""
        return " ".join(
            "".join(chr(65 + rng.randrange(26)) for _ in word) for word in reference.text.split(" ")
        )


register_family(Cipher)
