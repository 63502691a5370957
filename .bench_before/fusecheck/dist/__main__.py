"""`python -m fusecheck.dist ...` (also under torchrun: uses RANK/WORLD_SIZE and torchrun's process group)."""
import sys

from fusecheck.dist.cli import main

sys.exit(main())
