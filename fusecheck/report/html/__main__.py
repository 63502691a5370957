"""python -m fusecheck.report.html [KIND] REPORT.json OUT.html"""
import sys

from fusecheck.report.html.cli import main

sys.exit(main())
