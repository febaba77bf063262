"""Stage 3, store: writer.py creates a store from a Plan and writes blocks (chunks first,
ledger cell last); ledger.py counts what is done (the ledger is read by
sweep.format.ledger.Ledger); upgrade.py migrates older formats; lock.py keeps one writer.
Imports the plan's types and the store format (sweep/format/)."""
