"""Block math without a model: linalg.py (the CPU's BLAS/LAPACK), spectra.py (eig of J_tt),
depth.py (products and Lyapunov exponents), memory.py (lag profiles), dtypes.py (the compute
dtypes as torch's). torch only: no Dask, no
YAML."""
