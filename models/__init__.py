"""Reference models the checker is exercised on; each module's `build()` returns a fusecheck Case."""
