"""Targets fusecheck ships with: the built-in default of `fusecheck check` (a transformer block), so that a wheel install runs it with no argument."""
