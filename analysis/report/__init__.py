"""Renderers of the studies: analyze.py (`tdos analyze`), markdown.py, fits_json.py,
compare.py (compare.md), figures.py, depth.py, memory.py, inputs.py, paper.py, and text.py,
the captions and sentences they share (no renderer imports another's text)."""
