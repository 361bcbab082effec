"""``python -m omnidraft.distill teacher|train --set KEY=VALUE ...`` (torchrun on the GPU machine)."""

import sys

from .cli import gpu_main

sys.exit(gpu_main())
