"""BertConfig: the encoder's hyper-parameters, the paper's presets and a JSON round trip;
and the vocabulary file that goes with them."""

import dataclasses
import json
import logging
import os

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

    def __post_init__(self):
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
                raise ValueError(f"BertConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.hidden_act not in ("gelu", "gelu_new", "gelu_approximate", "relu", "tanh", "silu"):
            raise ValueError(f"BertConfig.hidden_act {self.hidden_act!r} is not supported")

    @property
    def head_size(self):
        return self.hidden_size // self.num_heads

    @classmethod
    def preset(cls, name, **overrides):
        """A paper-sized config: `tiny`, `mini`, `small`, `medium`, `base` or `large`."""
        if name not in _PRESET_SHAPES:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = _PRESET_SHAPES[name]
        values = dict(num_layers=layers, hidden_size=hidden, num_heads=heads,
                      intermediate_size=4 * hidden)
        values.update(overrides)
        return cls(**values)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values):
        """Builds a config from a dict, ignoring keys that are not encoder hyper-parameters."""
        if not isinstance(values, dict):
            raise ValueError(f"a config is a JSON object of hyper-parameters, not "
                             f"{type(values).__name__ if values is not None else 'null'}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_preset_or_file(cls, name_or_path):
        """A preset name, a `config.json` path, or a checkpoint directory holding one."""
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


def read_text(path):
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


def read_vocab(path):
    """The WordPiece vocabulary: one token a line, the line number is the id.

    A token listed twice keeps both lines (ids stay line numbers) and, as in HF transformers,
    the later line's id is the one text is tokenized to; a one-line warning names the token
    and the lines.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    vocab = read_text(path).split("\n")
    while vocab and vocab[-1] == "":
        vocab.pop()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    _warn_duplicates(path, vocab)
    return vocab


def _warn_duplicates(path, vocab):
    lines, repeated = {}, {}
    for number, token in enumerate(vocab, start=1):
        if token in lines:
            repeated.setdefault(token, [lines[token]]).append(number)
        lines.setdefault(token, number)
    if repeated:
        token, numbers = next(iter(repeated.items()))
        more = f" (and {len(repeated) - 1} more tokens)" if len(repeated) > 1 else ""
        log.warning("%s: token %r is on lines %s; the last one's id is used, as in "
                    "transformers%s", path, token, ", ".join(map(str, numbers)), more)
