"""Reading token ranges from shards: memory-mapped locally, ranged requests on gs://.

Opening checks every shard against the index before any XLA work: present, the size the
index recorded, and its hash (locally the SHA-256 of the bytes; on gs:// the MD5 Cloud
Storage keeps for the object), each failure one paragraph naming the shard. Reads never
download a whole shard from a bucket: each asks for the byte range of the tokens it needs.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.tokens.shard_format import INDEX, parse_index
from trainer.errors import UserError


def _bad_shard(where: str, problem: str) -> UserError:
    return UserError(f"token shard {where} {problem}. The shards must be exactly what `tpu-trainer tokenize` wrote "
                     "(its index records each one's size and hash). Fix: restore the shard, or tokenize the corpus "
                     "again into a new directory.")


class ShardReader:
    """The shards of one tokenized directory, local or gs://."""

    def __init__(self, path: str, concurrency: int = 16):
        """`concurrency`: ranged requests in flight at once on gs:// (Cloud Storage serves many;
        a single-threaded local emulator wants at most its listen backlog of 5)."""
        from trainer.storage.location import is_remote

        self.path, self.remote, self.concurrency = path, is_remote(path), concurrency
        self._fs: Any = None
        if self.remote:
            from trainer.storage.bucket import filesystem
            from trainer.storage.location import parse_remote

            self._root = parse_remote(path, f"data.path={path}")
            self._fs = filesystem()
            try:
                text = self._fs.cat_file(self._root.object_path(INDEX)).decode()
            except FileNotFoundError:
                raise UserError(f"no token-shard index at {path}/{INDEX}. Fix: point the data path at a directory "
                                "written by `tpu-trainer tokenize --out gs://...`.") from None
        else:
            try:
                text = (Path(path) / INDEX).read_text()
            except FileNotFoundError:
                raise UserError(f"no token-shard index at {Path(path) / INDEX}. Fix: point the data path at a "
                                "directory written by `tpu-trainer tokenize`.") from None
        self.index = parse_index(text, f"{path}/{INDEX}")
        self.dtype = np.dtype(self.index["dtype"]).newbyteorder("<")
        self._maps: dict[int, np.ndarray] = {}
        self._verify()

    def _location(self, shard: dict) -> str:
        return self._root.object_path(shard["file"]) if self.remote else str(Path(self.path) / shard["file"])

    def _verify(self) -> None:
        with ThreadPoolExecutor(max_workers=4) as pool:  # hashing releases the GIL
            list(pool.map(self._verify_one, self.index["shards"]))

    def _verify_one(self, shard: dict) -> None:
        where = self._location(shard)
        if self.remote:
            try:
                info = self._fs.info(where)
            except FileNotFoundError:
                raise _bad_shard(f"gs://{where}", "is missing") from None
            size, same = int(info["size"]), info.get("md5Hash") == shard.get("md5")
            where = f"gs://{where}"
        else:
            path = Path(where)
            if not path.exists():
                raise _bad_shard(where, "is missing")
            size = path.stat().st_size
            same = size == shard["bytes"] and _sha256(path) == shard["sha256"]
        if size != shard["bytes"]:
            raise _bad_shard(where, f"is {size} bytes, but the index recorded {shard['bytes']} (truncated or replaced)")
        if not same:
            raise _bad_shard(where, "failed verification: its hash does not match the index (corrupted after it "
                                    "was written)")

    def read(self, shard_number: int, start: int, count: int) -> np.ndarray:
        """`count` token ids of shard `shard_number` from token `start`, as int64."""
        return self.read_many([(shard_number, start, count)])[0]

    def read_many(self, pieces: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """Each (shard, start, count) piece's token ids, as int64. On gs:// the ranged requests
        of a whole batch go out together (gcsfs `cat_ranges`, concurrent): a batch's rows sit
        at random places, so one request after the other would pay a round trip per row."""
        if not self.remote:
            return [self._mapped(shard)[start:start + count].astype(np.int64) for shard, start, count in pieces]
        size = self.dtype.itemsize
        blobs = self._fs.cat_ranges([self._location(self.index["shards"][shard]) for shard, _, _ in pieces],
                                    [start * size for _, start, _ in pieces],
                                    [(start + count) * size for _, start, count in pieces], on_error="raise",
                                    batch_size=self.concurrency)
        return [np.frombuffer(blob, dtype=self.dtype).astype(np.int64) for blob in blobs]

    def _mapped(self, shard_number: int) -> np.ndarray:
        if shard_number not in self._maps:
            self._maps[shard_number] = np.memmap(self._location(self.index["shards"][shard_number]),
                                                 dtype=self.dtype, mode="r")
        return self._maps[shard_number]


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:  # hashlib's own loop: one small reused buffer, not a block per read
        return hashlib.file_digest(f, "sha256").hexdigest()
