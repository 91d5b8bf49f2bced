"""The benchmarks beside their records (*.json, ratios.png), run from the
repository root as modules (`python -m bench.calls`; the Makefile's targets
do), and their helpers (timing.py, machine.py)."""
