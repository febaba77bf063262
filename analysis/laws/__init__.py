"""App. B laws: laws.py, selfavg.py (self-averaging), uncertainty.py (their CIs)."""
