"""Studies of a store: tables.py (Table I, β vs L and depth), precision.py (fp32 vs fp64),
compare.py (models compared), depth.py (stacked blocks), memory.py (token memory)."""
