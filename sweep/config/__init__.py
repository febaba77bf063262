"""Stage 1, config: the YAML read and checked before anything else runs; every error names
its field and the fix. sections.py (SweepConfig and one dataclass per section, each field
declared once with its help and check: sweep/format/fields.py), load.py (load_config: the YAML
read, each section built from its declaration and checked), docs.py (docs/config.md's table
from the declarations), identity.py (identity_dict, fingerprint: what of the config decides
the store), inputs.py, choices.py (the allowed values later stages import), validate.py.
Imports only sweep.errors, the store format (sweep/format/: the declaration mechanism, the
dtypes, the `analysis:` section's Settings, the `study:` section's Study) and the cluster's
config (cluster/config.py), whose ConfigError load.py turns into sweep's."""
