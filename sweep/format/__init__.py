"""The store format: the writer's promise that the readers read. schema.py (format number,
arrays, codes, StoreError and the one format check), ledger.py (ledger codes, their one
meaning, `Ledger`), dtypes.py (the compute dtypes, one row each), settings.py (the config's
`analysis:` section, which the store records).

sweep (the writer) and analysis (the readers) both import it; it imports neither of them, nor
cluster, torch or Dask: numpy and zarr only. It sits under sweep/ because the top level holds
only sweep/, analysis/ and cluster/, and the format is what the writer promises: the lowest
room of the writer's package, the one room of sweep that analysis may enter.
"""
