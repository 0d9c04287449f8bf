"""bench/lib_progress.py — the progress line of the long benchmark scripts written in
Python (bench/ab_builds.py, bench/nccl_compare.py); bench/lib_progress.sh is the same
for the shell scripts.

    progress = Progress(total)       # total steps to come
    progress.step("pair 1: ...")     # one step begins: what runs now
    progress.note("pair 1: 123 MB/s", sys.stdout)   # a line that stays (default: stderr)
    progress.end()                   # the run is over: the line is cleared

When stderr is a terminal, step() rewrites one line in place, with the step count, the
elapsed time and the time left estimated from the steps done so far; note() prints its
line above it. Otherwise nothing is drawn and note() only prints, so logs keep what the
scripts printed before.
"""
import shutil
import sys
import time


def _clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    def __init__(self, total, stream=sys.stderr):
        self.total = total
        self.done = -1
        self.start = time.monotonic()
        self.stream = stream
        self.tty = stream.isatty()
        self.line = ""

    def step(self, text):
        self.done += 1
        if not self.tty:
            return
        elapsed = time.monotonic() - self.start
        left = ""
        if 0 < self.done < self.total:
            estimate = elapsed * (self.total - self.done) / self.done
            if estimate >= 1:
                left = f", about {_clock(estimate)} left"
        width = len(str(self.total))
        line = f"[{self.done + 1:>{width}}/{self.total}] {_clock(elapsed)}{left}: {text}"
        columns = shutil.get_terminal_size((100, 20)).columns
        self.line = line[:columns - 1]
        self.stream.write("\r\033[K" + self.line)
        self.stream.flush()

    def note(self, text, out=None):
        out = out or self.stream
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
        out.write(text + "\n")
        out.flush()
        if self.tty and self.line:
            self.stream.write(self.line)
            self.stream.flush()

    def end(self):
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()
