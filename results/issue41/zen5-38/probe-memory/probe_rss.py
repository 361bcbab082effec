import resource, sys, time, logging
from pathlib import Path
from omnidraft.runtime import wideprobe
from omnidraft.runtime.settings import Settings
from omnidraft.assets import models
logging.basicConfig(level=logging.INFO)
def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 1e6
s = Settings(target=models.QWEN_05B, threads=2, n_ctx=int(sys.argv[1]))
root = Path('/tmp/s38/state'); root.mkdir(exist_ok=True)
print('before', rss())
eng = {}
for which in ('pinned', 'wide'):
    p = models.resolve(models.QWEN_05B if which == 'pinned' else models.QWEN_05B + ':wide')
    e, plan = wideprobe._load(s, p, root)
    eng[which] = e
    print(which, 'loaded', rss())
t = wideprobe._time(eng, 4)
print('timed', rss(), 'peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3, t)
