"""The store, read: schema.py (the one declaration of what is on disk), ledger.py (the one
reading of what is done), store.py (Store, open_store), settings.py (the analysis settings),
aggregate.py (incremental histograms beside the store)."""
