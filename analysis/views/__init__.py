"""What a person watches: live.py (the live figure and /tdos snapshot during a sweep),
summary.py (the lines printed after it)."""
