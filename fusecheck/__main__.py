"""`python -m fusecheck ...`: the same command as `fusecheck ...`."""
import sys

from fusecheck.cli.main import main

sys.exit(main())
