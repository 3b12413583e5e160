"""Where a model is: `hf://ORG/NAME[@REVISION][/SUBFOLDER]`, `kaggle://OWNER/MODEL/FRAMEWORK/
VARIATION/VERSION`, or a bare name people type (`bert-base-uncased`) from `NAMES`.

`hf://` addresses are parsed by huggingface_hub's own parser (`parse_hf_uri`), so they mean
what they mean there (a revision may be a branch, a tag, a commit or `refs/pr/N`).

>>> parse("hf://google-bert/bert-base-uncased@v1.0")
Address(scheme='hf', repo='google-bert/bert-base-uncased', revision='v1.0', subfolder='')
>>> parse("bert-base-uncased").repo, parse("cross-encoder/ms-marco-MiniLM-L-6-v2").repo
('google-bert/bert-base-uncased', 'cross-encoder/ms-marco-MiniLM-L-6-v2')
>>> parse("saved_models/minilm-l6-v2") is None      # a path: not the Hub's
True
"""

from __future__ import annotations

import dataclasses
import re

# The bare names people type, and the Hub repository each means (docs/checkpoints.md shows the
# table). A repository named here is also accepted without `hf://` (e.g.
# "cross-encoder/ms-marco-MiniLM-L-6-v2").
NAMES: dict[str, str] = {
    # Google's BERTs (Devlin et al., 2018), as transformers names them
    **{name: f"google-bert/{name}" for name in (
        "bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased",
        "bert-base-multilingual-cased", "bert-base-multilingual-uncased", "bert-base-chinese",
        "bert-large-uncased-whole-word-masking", "bert-large-cased-whole-word-masking",
        "bert-large-uncased-whole-word-masking-finetuned-squad",
        "bert-large-cased-whole-word-masking-finetuned-squad")},
    # the smaller BERTs (Turc et al., 2019)
    "bert-tiny": "google/bert_uncased_L-2_H-128_A-2",
    "bert-mini": "google/bert_uncased_L-4_H-256_A-4",
    "bert-small": "google/bert_uncased_L-4_H-512_A-8",
    "bert-medium": "google/bert_uncased_L-8_H-512_A-8",
    # sentence encoders (sentence-transformers, BAAI, intfloat)
    **{name: f"sentence-transformers/{name}" for name in (
        "all-MiniLM-L6-v2", "all-MiniLM-L12-v2", "multi-qa-MiniLM-L6-cos-v1",
        "paraphrase-MiniLM-L6-v2", "paraphrase-multilingual-MiniLM-L12-v2")},
    **{name: f"BAAI/{name}" for name in (
        "bge-small-en-v1.5", "bge-base-en-v1.5", "bge-large-en-v1.5")},
    **{name: f"intfloat/{name}" for name in ("e5-small-v2", "e5-base-v2", "e5-large-v2")},
    # cross-encoders (rerankers) trained on MS MARCO
    **{name: f"cross-encoder/{name}" for name in (
        "ms-marco-MiniLM-L-6-v2", "ms-marco-MiniLM-L-12-v2", "ms-marco-TinyBERT-L-2-v2")},
    # fine-tuned BERTs: biomedical, named entities, SQuAD 2.0, sentiment
    "biobert-base-cased-v1.2": "dmis-lab/biobert-base-cased-v1.2",
    "bert-base-NER": "dslim/bert-base-NER",
    "bert-base-cased-squad2": "deepset/bert-base-cased-squad2",
    "bert-base-multilingual-uncased-sentiment": "nlptown/bert-base-multilingual-uncased-sentiment",
}
_REPOS = frozenset(NAMES.values())
HF, KAGGLE = "hf://", "kaggle://"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclasses.dataclass(frozen=True)
class Address:
    """A model on a hub: `scheme` "hf" or "kaggle", the `repo` (a Kaggle handle without its
    version), the `revision` (a branch, tag or commit; Kaggle: the version number; "" for the
    default) and a `subfolder` of the repository holding the model ("" for its root)."""

    scheme: str
    repo: str
    revision: str = ""
    subfolder: str = ""

    def __str__(self) -> str:
        if self.scheme == "kaggle":
            return f"{KAGGLE}{self.repo}" + (f"/{self.revision}" if self.revision else "")
        at = f"@{self.revision}" if self.revision else ""
        return f"{HF}{self.repo}{at}" + (f"/{self.subfolder}" if self.subfolder else "")

    @property
    def pinned(self) -> bool:
        """Whether the revision names one commit (a Kaggle version is one too), so that what
        it gives never changes."""
        return bool(_COMMIT.match(self.revision)) or (self.scheme == "kaggle"
                                                      and self.revision.isdigit())


def is_address(name: str) -> bool:
    """Whether `name` is written as a hub address (`hf://`, `kaggle://`) or is a bare name
    `parse` maps (a local directory or a shipped name still wins: see `kbert.hub.resolve`)."""
    return name.startswith((HF, KAGGLE)) or name in NAMES or name in _REPOS


def parse(name: str, revision: str | None = None) -> Address | None:
    """The `Address` `name` names, or None when it is no hub address (a path, a shipped
    name). `revision` (the `revision=` argument) is taken where the address has none; two
    different ones are refused."""
    if name.startswith(KAGGLE):
        address = _parse_kaggle(name)
    elif name.startswith(HF):
        from huggingface_hub import parse_hf_uri
        from huggingface_hub.errors import HfUriError
        try:
            uri = parse_hf_uri(name)
        except HfUriError as e:
            raise ValueError(f"{name}: not a Hub address ({e.msg}); write hf://ORG/NAME, "
                             f"optionally @REVISION") from None
        if uri.type != "model":
            raise ValueError(f"{name}: a {uri.type} repository, not a model")
        address = Address("hf", uri.id, uri.revision or "", uri.path_in_repo.strip("/"))
    elif name in NAMES or name in _REPOS:
        address = Address("hf", NAMES.get(name, name))
    else:
        return None
    if revision:
        if address.revision and address.revision != revision:
            raise ValueError(f"{name} names revision {address.revision!r} but revision="
                             f"{revision!r} was given; give one")
        address = dataclasses.replace(address, revision=str(revision))
    return address


def _parse_kaggle(name: str) -> Address:
    """kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION] (keras-hub's presets are
    kaggle://keras/bert/keras/bert_base_en_uncased/2)."""
    parts = name[len(KAGGLE):].strip("/").split("/")
    if len(parts) not in (4, 5) or not all(parts):
        raise ValueError(f"{name}: a Kaggle model is kaggle://OWNER/MODEL/FRAMEWORK/VARIATION"
                         f"/VERSION (e.g. kaggle://keras/bert/keras/bert_base_en_uncased/2)")
    version = parts[4] if len(parts) == 5 else ""
    if version and not version.isdigit():
        raise ValueError(f"{name}: the Kaggle version must be a number, found {version!r}")
    return Address("kaggle", "/".join(parts[:4]), version)
