"""Running a target once: eager or compiled, forward and backward, digests of what it produced, the casts every run makes, and the memory it took."""
