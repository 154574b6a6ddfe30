"""Checkpoints: when to save (`checkpointer`), what a checkpoint holds (`state`), files that are
whole or absent (`io`), sharded state on many devices (`sharded`), which checkpoints count
(`index`, `store`), trusting a file (`verify`), and where a resumed run starts (`resume`)."""
