"""Parallelism: the device mesh and its axes (`mesh`, no torch) and sharding on it (`sharding`)."""
