"""Pre-training data as token shards: the tokenizer (`tokenizer`), the shard files and their
index (`shard_format`), tokenizing a corpus (`tokenize_corpus`, `tpu-trainer tokenize`),
one seeded global order (`permutation`), reading local or gs:// shards (`shard_reader`), and
the dataset the engine trains from (`token_shards.TokenShards`)."""
