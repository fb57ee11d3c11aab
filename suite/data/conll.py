"""CoNLL-style token-per-line files and tag-scheme conversion to IOB2.

Columns are split on whitespace (CoNLL-2003 uses spaces, WNUT-17 tabs); `-DOCSTART-` lines
open a new document; any line that is empty after `strip()` ends a sentence (WNUT-17 train
marks many breaks with a lone tab).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from suite.data.tables import read_text, text_lines
from suite.errors import DataError


@dataclass(frozen=True)
class Sentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]
    document: int  # index of the -DOCSTART- document it belongs to (0 when the file has none)
    line: int  # line number of its first token, for error messages


def read_conll(path: Path, token_column: int = 0, tag_column: int = -1) -> list[Sentence]:
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    document, start = 0, 0

    def flush() -> None:
        if tokens:
            sentences.append(Sentence(tuple(tokens), tuple(tags), document, start))
            tokens.clear()
            tags.clear()

    for line_no, line in text_lines(read_text(path)):
        cells = line.split()
        if not cells:
            flush()
        elif cells[0] == "-DOCSTART-":
            flush()
            document += 1
        else:
            token, tag = _token_and_tag(cells, token_column, tag_column, f"{path}:{line_no}")
            if not tokens:
                start = line_no
            tokens.append(token)
            tags.append(tag)
    flush()
    if not sentences:
        raise DataError(f"{path}: no examples (no token lines)")
    return sentences


def _token_and_tag(cells: list[str], token_column: int, tag_column: int, where: str) -> tuple[str, str]:
    """The token and tag cells of one line; they must be two different columns (a one-column
    line would otherwise read its word as its own tag)."""
    n = len(cells)
    if not (-n <= token_column < n and -n <= tag_column < n) or token_column % n == tag_column % n:
        raise DataError(f"{where}: expected a token and a tag column, found {n} field(s)")
    return cells[token_column], cells[tag_column]


def iob1_to_iob2(tags: tuple[str, ...]) -> tuple[str, ...]:
    """IOB1 starts an entity with I- unless it directly follows one of the same type."""
    out = []
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            prev = out[i - 1] if i else "O"
            if prev == "O" or prev[2:] != tag[2:]:
                tag = "B-" + tag[2:]
        out.append(tag)
    return tuple(out)


def iobes_to_iob2(tags: tuple[str, ...]) -> tuple[str, ...]:
    mapping = {"S": "B", "E": "I", "B": "B", "I": "I"}
    return tuple(t if t == "O" else f"{mapping[t[0]]}-{t[2:]}" for t in tags)


TO_IOB2 = {"iob1": iob1_to_iob2, "iob2": lambda tags: tuple(tags), "iobes": iobes_to_iob2}


# Tag prefixes each scheme allows; IOB1 and IOB2 differ in where B- is used, not in the set.
PREFIXES = {"iob1": ("B-", "I-"), "iob2": ("B-", "I-"), "iobes": ("B-", "I-", "E-", "S-")}


def check_tags(
    sentences: list[Sentence], types: list[str], path: Path | str, scheme: str | None = None
) -> None:
    """Every tag is O or a prefix of the file's scheme plus one of the spec's entity types.

    `scheme` is the task's `data.tag_scheme`; without it any IOB/IOBES prefix passes.
    """
    prefixes = PREFIXES.get(scheme, PREFIXES["iobes"])
    named = "/".join(prefixes) + (f" (tag_scheme {scheme})" if scheme else "")
    for sentence in sentences:
        for offset, tag in enumerate(sentence.tags):
            if tag != "O" and not (tag[:2] in prefixes and tag[2:] in types):
                # A hub row (line 0) is named by its row and token; a file's tag by its line.
                where = (
                    f"{path}:{sentence.line + offset}"
                    if sentence.line
                    else (f"{path}: row {sentence.document + 1}, token {offset + 1}")
                )
                raise DataError(f"{where}: tag {tag!r} is not O or {named} of the spec's labels {types}")
