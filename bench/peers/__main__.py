"""`python bench/peers`: the run (`peers.run`), with bench/ on the path for its `common`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers.run import main

main()
