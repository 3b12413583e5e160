"""Words in messages: a count with its noun in the right number.

>>> plural(1, "row"), plural(2, "row"), plural(0, "query", "queries")
('1 row', '2 rows', '0 queries')
"""


def plural(count: int, word: str, words: str | None = None) -> str:
    """"1 row", "2 rows" (`words`: the plural where it is not `word` + "s")."""
    return f"{count} {word if count == 1 else words or word + 's'}"
