"""The shell commands the documentation shows, as parsed words.

Every fenced ``bash`` block of ``README.md``, ``docs/*.md`` and ``bench/README.md`` is parsed with
``bashlex`` (a real bash grammar: continuation lines, comments, ``&&``, pipes and ``$(...)``
command substitutions are handled as bash handles them). Each simple command becomes a
:class:`DocCommand`; tests run or parse every one of them (``tests/test_docs_commands.py``,
``tests/loadtest/test_docs_locust.py`` and the e2e suite).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import bashlex

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = ("README.md", "docs/*.md", "bench/README.md")
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class DocCommand:
    """One simple command of a documented ``bash`` block.

    ``env`` holds the ``NAME=value`` assignments written before the program,
    ``words`` the program and its arguments with bash quoting removed.
    """

    source: str
    line: int
    env: tuple[str, ...]
    words: tuple[str, ...]

    @property
    def program(self) -> str:
        return self.words[0]

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}:{' '.join(self.words)[:60]}"


class _Collector(bashlex.ast.nodevisitor):
    def __init__(self) -> None:
        self.found: list[tuple[tuple[str, ...], tuple[str, ...], int]] = []

    def visitcommand(self, node, parts):
        env = tuple(p.word for p in parts if p.kind == "assignment")
        words = tuple(p.word for p in parts if p.kind == "word")
        if words:
            self.found.append((env, words, node.pos[0]))


def doc_files(root: Path = ROOT) -> list[Path]:
    """The documentation files whose commands are tested, in a stable order."""
    out: list[Path] = []
    for pattern in DOC_FILES:
        out.extend(sorted(root.glob(pattern)))
    return out


def commands_in(text: str, source: str) -> list[DocCommand]:
    """Parse every ``bash`` block of a Markdown text into simple commands.

    Raises:
        ValueError: a block that bash cannot parse (e.g. a ``<placeholder>``), naming its line.
    """
    out: list[DocCommand] = []
    for block in _FENCE.finditer(text):
        first_line = text.count("\n", 0, block.start(1)) + 1
        body = block.group(1)
        try:
            trees = bashlex.parse(body)
        except bashlex.errors.ParsingError as e:
            raise ValueError(f"{source}:{first_line}: bash cannot parse this block: {e}") from e
        for tree in trees:
            collector = _Collector()
            collector.visit(tree)
            for env, words, pos in collector.found:
                line = first_line + body.count("\n", 0, pos)
                out.append(DocCommand(source, line, env, words))
    return out


def all_commands(root: Path = ROOT) -> list[DocCommand]:
    """Every documented command of the repository (see :data:`DOC_FILES`)."""
    out: list[DocCommand] = []
    for path in doc_files(root):
        out.extend(commands_in(path.read_text(), path.relative_to(root).as_posix()))
    return out
