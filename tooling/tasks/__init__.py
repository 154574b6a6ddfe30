"""The invoke tasks, by group (engine, images, pods, bench); `tasks.py` collects them.

Each task is thin: it parses its arguments, calls the engine's CLI or a `tooling/` module,
and turns a `ToolingError` into invoke's `Exit`. Names and help texts come from one table
(`options.TABLE`); `make` reaches every task through `invoke from-make` (`make.py`).
"""
