"""BertConfig: the encoder's hyper-parameters, the paper's presets and a JSON round trip;
and the vocabulary file that goes with them (`read_vocab`, `write_vocab`, the special tokens)."""

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any, cast

# name: (num_layers, hidden_size, num_heads), as in the paper and Turc et al. (2019).
_PRESET_SHAPES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
PRESETS = tuple(_PRESET_SHAPES)
log = logging.getLogger(__name__)
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_CHARS_PER_WORD = 100  # longer words become [UNK], as in google-research/bert
# A reranker's classifier labels (`kbert.BertReranker`): how a checkpoint says it is one.
RELEVANCE_LABELS = ["irrelevant", "relevant"]


@dataclasses.dataclass
class BertConfig:
    """Hyper-parameters of the BERT encoder (Devlin et al., 2018, section 3).

    The defaults are BERT-base with the standard 30,522-token uncased vocabulary.

    Example:
    >>> config = BertConfig.preset("mini")
    >>> config.hidden_size, config.intermediate_size
    (256, 1024)
    >>> BertConfig.from_json(config.to_json()) == config
    True
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    causal: bool = False      # left-to-right attention (the paper's "LTR & No NSP" ablation)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})")
        for name in ("dropout", "attention_dropout", "layer_norm_epsilon", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"BertConfig.{name} must be a number, got {value!r}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(
                    f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if not isinstance(self.causal, bool):
            raise ValueError(f"BertConfig.causal must be true or false, got {self.causal!r}")
        if self.hidden_act not in ("gelu", "gelu_new", "gelu_approximate", "relu", "tanh", "silu"):
            raise ValueError(f"BertConfig.hidden_act {self.hidden_act!r} is not supported")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "BertConfig":
        """A paper-sized config: `tiny`, `mini`, `small`, `medium`, `base` or `large`."""
        if name not in _PRESET_SHAPES:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = _PRESET_SHAPES[name]
        values: dict[str, Any] = dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
                                      intermediate_size=4 * hidden)
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        """Builds a config from a dict, ignoring keys that are not encoder hyper-parameters."""
        if not isinstance(values, dict):
            raise ValueError(f"a config is a JSON object of hyper-parameters, not "
                             f"{type(values).__name__ if values is not None else 'null'}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "BertConfig":
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_any(cls, config: "BertConfig | dict | str") -> "BertConfig":
        """A config as given: a `BertConfig`, a dict, a preset name, or a config.json path.

        >>> BertConfig.from_any("tiny").num_layers, BertConfig.from_any({"num_heads": 4}).num_heads
        (2, 4)
        """
        if isinstance(config, cls):
            return config
        if isinstance(config, (str, os.PathLike)):
            return cls.from_preset_or_file(os.fspath(config))
        return cls.from_dict(cast(dict, config))

    @classmethod
    def from_preset_or_file(cls, name_or_path: str | os.PathLike) -> "BertConfig":
        """A preset name, a `config.json` path, or a checkpoint directory holding one."""
        name_or_path = os.fspath(name_or_path)
        if name_or_path in _PRESET_SHAPES:
            return cls.preset(name_or_path)
        path = name_or_path
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        if not os.path.isfile(path):
            raise ValueError(
                f"{name_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a config file")
        with open(path, encoding="utf-8") as f:
            try:
                return cls.from_dict(json.load(f))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None


def shown(names: Iterable[str], limit: int = 8) -> str:
    """'a, b, c and N more': a list in a one-line error message.

    >>> shown(["w1", "w2", "w3", "w4"], limit=2)
    'w1, w2 and 2 more'
    """
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def check_special_tokens(vocab: Sequence[str], source: str = "vocabulary") -> None:
    """Raises a one-line ValueError when `vocab` lacks one of BERT's `SPECIAL_TOKENS`.

    >>> check_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]"], "vocab.txt")
    Traceback (most recent call last):
    ...
    ValueError: vocab.txt: vocabulary lacks the special tokens [MASK]
    """
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        where = "" if source == "vocabulary" else f"{source}: "
        raise ValueError(f"{where}vocabulary lacks the special tokens {' '.join(missing)}")


def read_text(path: str | os.PathLike) -> str:
    """The text of a UTF-8 file, with universal newlines (as `open` gives) and a leading
    byte-order mark dropped. A byte sequence that is not UTF-8 raises
    `ValueError("FILE:LINE: ...")`, naming the line it is on.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "latin1.txt")
    >>> _ = open(path, "wb").write(b"caf\\xc3\\xa9\\ncaf\\xe9\\n")   # line 2 is Latin-1
    >>> read_text(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: ...latin1.txt:2: not UTF-8 (byte 0xe9 at column 4); save the file as UTF-8
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        raise ValueError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at column "
                         f"{column}); save the file as UTF-8") from None


def read_vocab(vocab: str | os.PathLike | Sequence[str]) -> list[str]:
    """The WordPiece vocabulary: one token a line, the line number is the id.

    A list of tokens is taken as it is (copied); either way the special tokens are checked.
    A token listed twice keeps both lines (ids stay line numbers) and, as in HF transformers,
    the later line's id is the one text is tokenized to; a one-line warning names the token
    and the lines.

    >>> read_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"])[-1]
    'hello'
    """
    if not isinstance(vocab, (str, os.PathLike)):
        vocab = list(vocab)
        check_special_tokens(vocab)
        return vocab
    path = os.fspath(vocab)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    tokens = read_text(path).split("\n")
    while tokens and tokens[-1] == "":
        tokens.pop()
    check_special_tokens(tokens, path)
    _warn_duplicates(path, tokens)
    return tokens


def _warn_duplicates(path: str, vocab: Sequence[str]) -> None:
    lines: dict[str, int] = {}
    repeated: dict[str, list[int]] = {}
    for number, token in enumerate(vocab, start=1):
        if token in lines:
            repeated.setdefault(token, [lines[token]]).append(number)
        lines.setdefault(token, number)
    if repeated:
        token, numbers = next(iter(repeated.items()))
        more = f" (and {len(repeated) - 1} more tokens)" if len(repeated) > 1 else ""
        log.warning("%s: token %r is on lines %s; the last one's id is used, as in "
                    "transformers%s", path, token, ", ".join(map(str, numbers)), more)


def write_vocab(vocab: Sequence[str], path: str | os.PathLike) -> None:
    """One token a line (`read_vocab`'s format), written atomically: no temporary file is
    left behind on failure."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory; give the vocab.txt file to write")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(f"{token}\n" for token in vocab))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
