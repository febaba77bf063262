"""Stage 1, config: the YAML read and checked before anything else runs; every error names
its field and the fix. load.py (SweepConfig, load_config), inputs.py, choices.py
(the allowed values later stages import), validate.py. Imports only sweep.errors, the
store format (sweep/format/: the dtypes, the `analysis:` section's Settings) and the
cluster's config (cluster/config.py), whose ConfigError load.py turns into sweep's."""
