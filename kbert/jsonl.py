"""JSON Lines: one JSON value a line, blank lines skipped; a line that is not JSON raises an
error naming the file and the line (and a file that is not UTF-8, `not_utf8`). Your own
files (`kbert.tasks.userdata`), the texts to index (`kbert.retrieval.passages`) and the
retrieval data (`kbert.retrieval.metrics`) read it.

Example:
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
>>> _ = open(path, "w").write('{"text": "hi"}\\n\\n[1, 2]\\n')
>>> list(json_lines(path))
[(1, {'text': 'hi'}), (3, [1, 2])]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kbert.hints import PathLike


def json_lines(path: PathLike, *, error: type[Exception] = ValueError,
               invalid: str = "invalid JSON: {msg}",
               encoding: str = "utf-8") -> Iterator[tuple[int, Any]]:
    """(line number from 1, value) for each non-blank line of the file. A line that is not
    JSON raises `error("PATH:LINE: " + invalid)`, `{msg}` in `invalid` the parser's reason."""
    with open(path, encoding=encoding) as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{path}:{number}: " + invalid.format(msg=e.msg)) from None
            yield number, value


def not_utf8(path: PathLike) -> str:
    """The one line for a file that is not UTF-8: where its first undecodable byte is (every
    reader of the user's files says it so)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        return (f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                f"{e.start}: {e.reason}); save it as UTF-8")
    return f"{path}: not UTF-8 text; save it as UTF-8"
