"""Block math without a model: linalg.py (the CPU's BLAS/LAPACK), spectra.py (eig of J_tt),
depth.py (products and Lyapunov exponents), memory.py (lag profiles), dtypes.py (the compute
dtypes as torch's), workspace.py (how many of J_tt's columns a chunk forms: no torch, the
budget reads it too). torch only: no Dask, no YAML."""
