"""Stage 1, config: the YAML read and checked before anything else runs; every error names
its field and the fix. sections.py (SweepConfig and one dataclass per section, the YAML
fields each reads), load.py (load_config: the YAML read, each section built and checked),
identity.py (identity_dict, fingerprint: what of the config decides the store), inputs.py,
choices.py (the allowed values later stages import), validate.py. Imports only sweep.errors,
the store format (sweep/format/: the dtypes, the `analysis:` section's Settings) and the
cluster's config (cluster/config.py), whose ConfigError load.py turns into sweep's."""
