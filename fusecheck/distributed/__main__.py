"""`python -m fusecheck.distributed ...` (also under torchrun: uses RANK/WORLD_SIZE and torchrun's process group)."""
import sys

from fusecheck.distributed.entry import main

sys.exit(main())
