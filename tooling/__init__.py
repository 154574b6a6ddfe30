"""The tooling around the engine: images, registries, pods. Drives the engine only through its CLI."""
