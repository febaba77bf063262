"""Block math without a model: linalg.py (the CPU's BLAS/LAPACK), spectra.py (eig of J_tt),
depth.py (products and Lyapunov exponents), memory.py (lag profiles). torch only: no Dask, no
YAML."""
