"""ration's memory service: revisioned agent memory, capacity contract, budgeted reads."""

import os

# One BLAS thread per process: scoring is one small matrix-vector product per call, and the
# service scales by worker processes (RATION_WORKERS), whose cores extra BLAS threads would only
# contend for. Read when numpy loads, so it is set before any memory module imports numpy;
# an operator's own setting wins.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
