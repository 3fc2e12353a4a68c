#!/usr/bin/python3
"""A progress bar for a build: reads ninja's "[done/total] ..." lines on
stdin, draws a tqdm bar on stderr (plain percentages without a terminal or
tqdm), and copies every line to the log file given as the argument.

    cmake --build build 2>&1 | build_progress.py build.log
"""

import re
import sys

STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def main():
    log = open(sys.argv[1], "w") if len(sys.argv) > 1 else None
    bar = None
    try:
        from tqdm import tqdm
        use_tqdm = sys.stderr.isatty()
    except ImportError:
        use_tqdm = False
    last_percent = -10
    for line in sys.stdin:
        if log:
            log.write(line)
            log.flush()
        match = STEP.match(line)
        if not match:
            continue
        done, total = int(match.group(1)), int(match.group(2))
        if use_tqdm:
            if bar is None or bar.total != total:
                if bar is not None:
                    bar.close()
                bar = tqdm(total=total, desc="build", unit="step", file=sys.stderr)
            bar.update(done - bar.n)
        else:
            percent = 100 * done // max(total, 1)
            if percent >= last_percent + 10 or done == total:
                print(f"  build {done}/{total}", file=sys.stderr, flush=True)
                last_percent = percent
    if bar is not None:
        bar.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
