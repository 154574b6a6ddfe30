"""Text to token ids: raw bytes, or a Hugging Face `tokenizers` tokenizer (BPE, trained offline).

`bytes`: ids 0-255 are the bytes, 256 is the end-of-text token that separates documents
(vocabulary 257). A `tokenizer.json` must define the end-of-text token `<|endoftext|>`;
`train_bpe` trains one on the corpus itself, so nothing is downloaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from trainer.errors import UserError

EOT = "<|endoftext|>"
BYTES = "bytes"


@dataclass(frozen=True)
class TokenizerSpec:
    """What the index records: the kind, the vocabulary size and the end-of-text id."""

    kind: str
    """"bytes" or "bpe"."""
    vocab_size: int
    eot_id: int

    def to_dict(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "eot_id": self.eot_id}


class Tokenizer:
    """Encodes one document's text to ids (the end-of-text token is added by the caller)."""

    def __init__(self, source: str):
        """`source`: "bytes", or the path of a tokenizer.json (UserError if unusable)."""
        self.source = source
        self._hf = None
        if source == BYTES:
            self.spec = TokenizerSpec(BYTES, 257, 256)
            return
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._hf = HFTokenizer.from_file(str(source))
        except Exception as exc:  # noqa: BLE001 - any failure: not a tokenizer file
            raise UserError(f"--tokenizer {source}: not a Hugging Face tokenizer.json ({exc}). Fix: pass the path of "
                            "a tokenizer.json, `bytes`, or train one with --train-bpe VOCAB.") from exc
        eot = self._hf.token_to_id(EOT)
        if eot is None:
            raise UserError(f"--tokenizer {source} has no end-of-text token {EOT!r}, which separates documents in "
                            f"the shards. Fix: add it as a special token, or train one with --train-bpe VOCAB.")
        self.spec = TokenizerSpec("bpe", self._hf.get_vocab_size(), eot)

    def encode(self, text: str) -> list[int]:
        if self._hf is None:
            return list(text.encode("utf-8", errors="replace"))
        return self._hf.encode(text, add_special_tokens=False).ids


def train_bpe(texts: Iterable[str], vocab_size: int, out: Path) -> Path:
    """Train a byte-level BPE tokenizer on `texts` (offline) and save it as `out` (tokenizer.json)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < 258:
        raise UserError(f"--train-bpe {vocab_size}: a byte-level BPE needs a vocabulary of at least 258 (256 bytes, "
                        "the end-of-text token and one merge). Fix: e.g. --train-bpe 4096.")
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    out.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out))
    return out
