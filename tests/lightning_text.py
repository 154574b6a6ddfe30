"""Our stdlib text in place of the WikiText2 download of Lightning's transformer demo (this machine
has no network): the demo's `WikiText2` reads `DIR/data/wikitext-2.txt` and downloads only when the
file is missing, so writing our text there lets the unchanged demo run."""
from __future__ import annotations

from pathlib import Path

from trainer.examples.bytelm_data import load_corpus

WORDS = 3_000  # a vocabulary of about a thousand words, 17 batches of 8 blocks: a small, fast model


def stdlib_wikitext(directory: str | Path) -> Path:
    """Write about WORDS words of the standard library's sources, as lines, to DIR/data/wikitext-2.txt."""
    text = bytes(load_corpus().train[:400_000]).decode("utf-8", errors="replace")
    lines, count = [], 0
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        lines.append(" ".join(words))
        count += len(words)
        if count >= WORDS:
            break
    path = Path(directory) / "data" / "wikitext-2.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
