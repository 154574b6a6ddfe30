"""Ready-made jobs; `digits` is the default job of `make train`."""
