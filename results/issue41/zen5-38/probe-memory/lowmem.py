import logging, sys
from pathlib import Path
from omnidraft.llama import hostmem
from omnidraft.runtime import wideprobe
from omnidraft.runtime.settings import Settings
from omnidraft.assets import models
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
hostmem.available_bytes = lambda meminfo=None: int(sys.argv[1]) << 20
root = Path(sys.argv[2]); root.mkdir(exist_ok=True)
e, plan = wideprobe.load(Settings(target=models.QWEN_05B, threads=2), root)
print("serving", e.path.name, "verdicts:", (root / "formats.json").read_text() if (root / "formats.json").exists() else None)
