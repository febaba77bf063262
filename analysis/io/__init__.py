"""The store, read: store.py (Store, open_store), aggregate.py (incremental histograms beside
the store). What is on disk, what is done and the analysis settings are declared by the store
format, sweep/format/."""
