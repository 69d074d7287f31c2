"""Benchmark harness: `python -m bench` measures both services beside same-run ceilings."""
