"""tdos sweep: a YAML config becomes a store of Jacobian spectra. The data path, one way:

    errors.py   the user-facing errors (imports nothing)
    format/     the store format, the ground floor: arrays, ledger codes and what "done" means,
                the compute dtypes, the `analysis:` section; imports nothing of sweep, analysis
                or cluster, and no torch: analysis (the reader) imports it too
    config/     YAML -> SweepConfig: the sections (sections.py), read and checked (load.py,
                choices.py, inputs.py, validate.py), the store's identity (identity.py);
                imports only errors, format/ and the cluster's own config
                (cluster/config.py: sweep imports cluster, never back)
    plan/       SweepConfig -> Plan: checkpoints inspected, model.path resolved once, token ids,
                layers, kinds, file identity; imports config, loads no torch at import
    store/      Plan -> the zarr store: writer, the sweep's view of the ledger, upgrade, lock
    tasks.py    Plan + ledger -> the tasks still to do (ModelRef carries the resolved location)
    worker/     runs a task: the model (layer-local or whole), J_tt, eig, chunks, ledger cell
    numerics/, blocks/, generic/   block math: torch only, no Dask
    budget/, run.py, cli.py       the client: --dry-run, the sweep on a cluster, `tdos`

tests/test_layers.py holds these arrows as data. See ARCHITECTURE.md.
"""
