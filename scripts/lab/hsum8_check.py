"""fa_rows.cpp's hsum8 (8 cells' 16-lane sums at once, by shuffles) against hsum (one cell at a time): the same bits?
Cuts the vector helpers out of the kernel source, compiles them with a random test for this CPU's widest tier and
for AVX2, and runs both (x86, g++ >= 12 for the shuffle path).

    .venv/bin/python scripts/lab/hsum8_check.py
"""

import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "backend" / "omnidraft" / "llama" / "patch" / "fa_rows.cpp"
MAIN = """
int main() {
    srand(1);
    long bad = 0, n = 0;
    for (int t = 0; t < 200000; t++) {
        v16f a[8];
        for (int g = 0; g < 8; g++)
            for (int l = 0; l < 16; l++)
                a[g][l] = (float) ((rand() / (double) RAND_MAX - 0.5) * exp10f(rand() % 7 - 3));
        float o[8];
        hsum8(a, o);
        for (int g = 0; g < 8; g++, n++) {
            const float h = hsum(a[g]);
            bad += memcmp(&h, &o[g], sizeof h) != 0;
        }
    }
    printf("%ld of %ld sums differ\\n", bad, n);
    return bad != 0;
}
"""


def main() -> int:
    text = SRC.read_text()
    helpers = text[text.index("// GCC's vector extensions"):text.index("// Scores of GROUP cells")]
    prog = ("#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\nconstexpr int LANES = 16;\n"
            "namespace {\n" + helpers + "}\n" + MAIN)
    rc = 0
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "t.cpp").write_text(prog)
        for tier, flags in (("avx512", ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma"]),
                            ("avx2", ["-mavx2", "-mfma"])):
            exe = str(Path(d) / tier)
            subprocess.run(["g++", "-O3", "-std=c++17", "-Wno-psabi", *flags, str(Path(d) / "t.cpp"), "-o", exe],
                           check=True)
            out = subprocess.run([exe], capture_output=True, text=True)
            print(f"{tier}: {out.stdout.strip()}")
            rc |= out.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
