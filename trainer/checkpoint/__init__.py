"""Checkpoints: when to save (`policy`), what a checkpoint holds (`state`), files that are
whole or absent (`io`), sharded state on many devices (`sharded`), and which checkpoints
count (`store`, the manifest and its verification)."""
