"""CoNLL-style token-per-line files and tag-scheme conversion to IOB2.

Columns are split on whitespace (CoNLL-2003 uses spaces, WNUT-17 tabs); `-DOCSTART-` lines
open a new document; any line that is empty after `strip()` ends a sentence (WNUT-17 train
marks many breaks with a lone tab).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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

    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            cells = line.split()
            if not cells:
                flush()
            elif cells[0] == "-DOCSTART-":
                flush()
                document += 1
            else:
                try:
                    token, tag = cells[token_column], cells[tag_column]
                except IndexError:
                    raise DataError(
                        f"{path}:{line_no}: expected a token and a tag column, found {len(cells)} field(s)"
                    ) from None
                if not tokens:
                    start = line_no
                tokens.append(token)
                tags.append(tag)
    flush()
    return sentences


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


def check_tags(sentences: list[Sentence], types: list[str], path: Path) -> None:
    """Every tag is O or a known prefix plus one of the spec's entity types."""
    allowed_prefixes = ("B-", "I-", "E-", "S-")
    for sentence in sentences:
        for offset, tag in enumerate(sentence.tags):
            if tag != "O" and not (tag[:2] in allowed_prefixes and tag[2:] in types):
                raise DataError(
                    f"{path}:{sentence.line + offset}: tag {tag!r} is not O or B-/I- of the "
                    f"spec's labels {types}"
                )
