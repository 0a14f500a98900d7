"""Build datasets/sql/library/library.sqlite, the original database of the `sql` verifier's bundled dataset.

A small lending-library network: branches, authors, books, members, copies of books held at branches, and
loans of copies to members (some still out, some with fines). Values come from a seeded random generator,
so running this again rebuilds the same rows: `python scripts/make_sql_dataset.py [--out DIR]`.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from datetime import date, timedelta
from pathlib import Path

SEED = 20261121
SCHEMA = """
CREATE TABLE branch (
    branch_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    city TEXT NOT NULL,
    opened_year INTEGER NOT NULL
);
CREATE TABLE author (
    author_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    country TEXT NOT NULL,
    birth_year INTEGER
);
CREATE TABLE book (
    book_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    author_id INTEGER NOT NULL REFERENCES author(author_id),
    genre TEXT NOT NULL,
    published_year INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    price REAL NOT NULL
);
CREATE TABLE member (
    member_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    home_branch_id INTEGER NOT NULL REFERENCES branch(branch_id),
    joined_date TEXT NOT NULL,
    age INTEGER NOT NULL
);
CREATE TABLE copy (
    copy_id INTEGER PRIMARY KEY,
    book_id INTEGER NOT NULL REFERENCES book(book_id),
    branch_id INTEGER NOT NULL REFERENCES branch(branch_id),
    condition TEXT NOT NULL
);
CREATE TABLE loan (
    loan_id INTEGER PRIMARY KEY,
    copy_id INTEGER NOT NULL REFERENCES copy(copy_id),
    member_id INTEGER NOT NULL REFERENCES member(member_id),
    loan_date TEXT NOT NULL,
    return_date TEXT,
    fine REAL
);
"""
BRANCHES = [
    ("Riverside", "Ashford", 1962),
    ("Old Mill", "Ashford", 1985),
    ("Harbour View", "Bellport", 1974),
    ("North Gate", "Bellport", 2001),
    ("Hilltop", "Corrin", 1990),
    ("Lantern Square", "Dunmere", 2012),
]
COUNTRIES = ["Norway", "Chile", "Kenya", "Japan", "Canada", "Portugal", "India", "Ireland"]
FIRST = [
    "Ada",
    "Bram",
    "Cleo",
    "Dario",
    "Esme",
    "Farid",
    "Greta",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Luca",
    "Mina",
    "Nils",
    "Oona",
    "Pavel",
    "Quinn",
    "Rosa",
    "Sami",
    "Tove",
    "Umar",
    "Vera",
    "Wen",
    "Yara",
]
LAST = [
    "Aalto",
    "Berg",
    "Costa",
    "Dube",
    "Eko",
    "Fonseca",
    "Gray",
    "Hale",
    "Ito",
    "Joshi",
    "Kane",
    "Lund",
    "Mori",
    "Nakata",
    "Okafor",
    "Pereira",
    "Quist",
    "Rao",
    "Silva",
    "Tanaka",
]
GENRES = ["mystery", "science", "history", "poetry", "fantasy", "travel", "cooking"]
WORDS = [
    "Silent",
    "Harbor",
    "Clock",
    "River",
    "Glass",
    "Winter",
    "Orchard",
    "Lantern",
    "Paper",
    "Copper",
    "Garden",
    "Signal",
    "Northern",
    "Hidden",
    "Salt",
    "Ember",
    "Atlas",
    "Quiet",
    "Iron",
    "Velvet",
]
NOUNS = ["Tide", "Archive", "Letters", "Map", "Machine", "Season", "Road", "Kitchen", "Song", "Light"]
CONDITIONS = ["new", "good", "worn", "damaged"]


def build(path: Path) -> None:
    """Write the database to path (replacing it)."""
    rng = random.Random(SEED)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany(
        "INSERT INTO branch VALUES (?, ?, ?, ?)", [(i + 1, *row) for i, row in enumerate(BRANCHES)]
    )
    authors = []
    for author_id in range(1, 34):  # authors 31-33 get no books (book.author_id is drawn from 1-30)
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if author_id == 30:
            name = authors[6][1]  # two different authors who share a name
        birth = None if author_id % 11 == 0 else rng.randint(1920, 1995)
        authors.append((author_id, name, rng.choice(COUNTRIES), birth))
    conn.executemany("INSERT INTO author VALUES (?, ?, ?, ?)", authors)
    books, titles = [], set()
    for book_id in range(1, 121):
        while True:
            title = f"The {rng.choice(WORDS)} {rng.choice(NOUNS)}"
            if title not in titles:
                titles.add(title)
                break
        books.append(
            (
                book_id,
                title,
                rng.randint(1, 30),
                rng.choice(GENRES),
                rng.randint(1950, 2025),
                rng.randint(90, 900),
                round(rng.uniform(4.0, 60.0), 2),
            )
        )
    conn.executemany("INSERT INTO book VALUES (?, ?, ?, ?, ?, ?, ?)", books)
    members = []
    for member_id in range(1, 201):
        joined = date(2015, 1, 1) + timedelta(days=rng.randint(0, 3600))
        members.append(
            (
                member_id,
                f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                rng.randint(1, len(BRANCHES)),
                joined.isoformat(),
                rng.randint(8, 90),
            )
        )
    conn.executemany("INSERT INTO member VALUES (?, ?, ?, ?, ?)", members)
    copies = []
    for copy_id in range(1, 401):
        copies.append((copy_id, rng.randint(1, 118), rng.randint(1, 5), rng.choice(CONDITIONS)))
    conn.executemany("INSERT INTO copy VALUES (?, ?, ?, ?)", copies)
    loans = []
    for loan_id in range(1, 1501):
        start = date(2022, 1, 1) + timedelta(days=rng.randint(0, 1000))
        if rng.random() < 0.08:
            returned, fine = None, None
        else:
            days = rng.randint(1, 60)
            returned = (start + timedelta(days=days)).isoformat()
            fine = round((days - 28) * 0.25, 2) if days > 28 else None
        loans.append((loan_id, rng.randint(1, 400), rng.randint(1, 195), start.isoformat(), returned, fine))
    conn.executemany("INSERT INTO loan VALUES (?, ?, ?, ?, ?, ?)", loans)
    conn.commit()
    conn.execute("VACUUM")
    conn.close()
    path.chmod(0o644)


def main() -> None:
    """Command line: build the database under --out (default: the repository's datasets/sql)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parent.parent / "datasets" / "sql"
    parser.add_argument("--out", type=Path, default=default, help="folder in Spider layout")
    args = parser.parse_args()
    build(args.out / "library" / "library.sqlite")
    print(args.out / "library" / "library.sqlite")


if __name__ == "__main__":
    main()
