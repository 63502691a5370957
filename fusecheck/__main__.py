"""`python -m fusecheck ...`: the same command as `fusecheck ...`."""
import sys

from fusecheck.cli import main

sys.exit(main())
