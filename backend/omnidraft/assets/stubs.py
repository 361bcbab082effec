'''Python function stubs for the ``stubs`` prompt set: a signature and a docstring (sometimes an import), the
body left for the model to write.

Written by hand for this benchmark (not copied from any corpus, HumanEval or the standard library), so
no drafter can have trained on them.  They come in pairs of the same kind (string parsing, data
structures, files and paths, dataclasses, small algorithms, async, everyday helpers); the set holds
out the first stub of each pair and streams the second, so both splits cover every kind.
'''

STUBS = (
    # ---------------------------------------------------------------- string parsing
    '''def parse_duration(text: str) -> float:
    """Parse a duration such as "1h30m", "45s", "2m5s" or "1.5h" into seconds.

    Units are h, m and s; they may appear in any order but at most once each.
    Raise ValueError for an empty string, an unknown unit or a repeated unit.
    """
''',
    '''def split_version(version: str) -> tuple[int, int, int, str]:
    """Split a version string like "2.14.1-rc.3" into (major, minor, patch, pre-release).

    A missing minor or patch number counts as 0 ("3" -> (3, 0, 0, "")) and a
    leading "v" is ignored.  The pre-release part is "" when there is none.
    """
''',
    '''def parse_query(query: str) -> dict[str, list[str]]:
    """Decode an URL query string ("a=1&b=two&a=3") into a dict of value lists.

    Keys without "=" get the value "", "+" means a space and %XX escapes are
    decoded as UTF-8.  Do not use urllib: this runs where it is unavailable.
    """
''',
    '''def wrap_paragraph(text: str, width: int, indent: str = "") -> list[str]:
    """Break text into lines of at most width characters, at spaces only.

    Every line starts with indent (counted in the width).  A single word longer
    than the room left stays on a line of its own rather than being cut.
    """
''',
    # ---------------------------------------------------------------- data structures
    '''from collections import OrderedDict


class ExpiringCache:
    """A mapping of at most max_items entries that also forgets entries older than ttl seconds.

    The clock is passed in so that tests can control time.  When full, put()
    evicts the least recently used entry.
    """

    def __init__(self, max_items: int, ttl: float, clock) -> None:
''',
    '''class IntervalSet:
    """A set of half-open integer intervals [start, end), kept sorted and merged.

    Adding [3, 7) to {[1, 4), [6, 9)} leaves {[1, 9)}; touching intervals merge too.
    """

    def add(self, start: int, end: int) -> None:
''',
    '''class RingBuffer:
    """A fixed-capacity FIFO buffer that overwrites its oldest item when full."""

    def __init__(self, capacity: int) -> None:
        """Create an empty buffer; capacity must be positive."""
''',
    '''class PrefixTree:
    """A trie over strings that can list every stored word starting with a prefix."""

    def words_with_prefix(self, prefix: str, limit: int = 10) -> list[str]:
        """Return up to limit stored words that start with prefix, in alphabetical order."""
''',
    # ---------------------------------------------------------------- files and paths
    '''import hashlib
from pathlib import Path


def find_duplicate_files(root: Path) -> list[list[Path]]:
    """Group the regular files under root whose contents are identical.

    Compare sizes first and hash only files that share a size.  Each group
    holds at least two paths, sorted; groups are sorted by their first path.
    Symbolic links are not followed.
    """
''',
    '''from pathlib import Path


def rotate_logs(path: Path, keep: int = 5) -> None:
    """Rotate a log file the way logrotate does: path -> path.1, path.1 -> path.2, ...

    At most keep old copies survive; the oldest one is deleted.  If path does
    not exist nothing happens.  Afterwards path is an empty file.
    """
''',
    '''def read_env_file(path: str) -> dict[str, str]:
    """Read KEY=VALUE lines from a .env file.

    Blank lines and lines starting with "#" are skipped, an optional "export "
    prefix is allowed, and values in single or double quotes keep their inner
    spaces.  Raise ValueError naming the line number of a malformed line.
    """
''',
    '''import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file at path with data so that readers see the old or the new content, never half.

    Write to a temporary file in the same directory, flush and fsync it, then
    rename it over path.  Remove the temporary file if anything fails.
    """
''',
    # ---------------------------------------------------------------- dataclasses
    '''from dataclasses import dataclass


@dataclass(frozen=True)
class Money:
    """An amount in the smallest unit of a currency (cents for EUR), so sums are exact."""

    cents: int
    currency: str

    def split(self, parts: int) -> list["Money"]:
        """Split into parts amounts that differ by at most one cent and add up to self."""
''',
    '''from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Stay:
    """A hotel booking from check_in (inclusive) to check_out (exclusive)."""

    guest: str
    check_in: date
    check_out: date

    def overlaps(self, other: "Stay") -> bool:
        """True when the two stays share at least one night."""
''',
    '''from dataclasses import dataclass, field


@dataclass
class ShoppingCart:
    """Items in a web shop cart: product id -> (unit price in cents, quantity)."""

    lines: dict[str, tuple[int, int]] = field(default_factory=dict)
    discount_percent: int = 0

    def total_cents(self) -> int:
        """The sum of price * quantity over all lines, less the discount, rounded half up."""
''',
    '''from dataclasses import dataclass


@dataclass
class Backoff:
    """Delays between retries: base, base * factor, base * factor ** 2, ... capped at max_delay."""

    attempts: int = 5
    base: float = 0.5
    factor: float = 2.0
    max_delay: float = 30.0

    def delays(self) -> list[float]:
        """The attempts - 1 waits to sleep between the attempts, in order."""
''',
    # ---------------------------------------------------------------- small algorithms
    '''def common_directory(paths: list[str]) -> str:
    """The deepest directory that contains every one of the given POSIX paths.

    Compare whole path components, not characters: "/a/bc" and "/a/bd" share
    "/a", not "/a/b".  Return "" for an empty list.
    """
''',
    '''def build_order(deps: dict[str, set[str]]) -> list[str]:
    """Order packages so that each comes after everything it depends on.

    deps maps a package to the packages it needs; packages that appear only as
    dependencies are included too.  Ties are broken alphabetically.  Raise
    ValueError listing the packages of a cycle if there is one.
    """
''',
    '''def run_lengths(data: bytes) -> list[tuple[int, int]]:
    """Run-length encode data as (byte value, run length) pairs, runs of at most 255."""
''',
    '''def moving_median(values: list[float], window: int) -> list[float]:
    """The median of each full window of consecutive values, in order.

    For an even window the median is the mean of the two middle values.
    """
''',
    '''def suggest_command(typed: str, commands: list[str]) -> str | None:
    """The known command closest to a mistyped one, for a "did you mean ...?" hint.

    Use the edit distance (insertions, deletions, substitutions).  Return None
    when the best distance is more than a third of len(typed), rounded up.
    """
''',
    '''from datetime import date


def group_by_iso_week(days: list[date]) -> dict[tuple[int, int], list[date]]:
    """Group dates by ISO (year, week number), each group sorted, the keys in order."""
''',
    # ---------------------------------------------------------------- async
    '''import asyncio
from typing import Awaitable, Callable, TypeVar

T = TypeVar("T")


async def gather_bounded(jobs: list[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Run the jobs with at most limit of them in flight; return their results in job order.

    If one job raises, cancel the ones still running and re-raise its exception.
    """
''',
    '''import asyncio


async def retry(fn, attempts: int = 3, delay: float = 0.2, retry_on=(ConnectionError,)):
    """Await fn() until it succeeds, at most attempts times, doubling delay after each failure.

    Only exceptions of the retry_on types are retried; others propagate at once.
    """
''',
    '''import asyncio
from typing import AsyncIterator


async def read_lines(reader: asyncio.StreamReader, max_length: int = 4096) -> AsyncIterator[str]:
    """Yield decoded lines (without the newline) from reader until end of stream.

    A line longer than max_length bytes raises ValueError instead of growing a
    buffer without bound.
    """
''',
    '''import asyncio
import time


class TokenBucket:
    """Lets at most rate operations per second through on average, with bursts of up to capacity."""

    def __init__(self, rate: float, capacity: int) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = float(capacity)
        self.updated = time.monotonic()

    async def acquire(self) -> None:
        """Wait until a token is available, then take it."""
''',
    # ---------------------------------------------------------------- everyday helpers
    '''def human_size(n: int) -> str:
    """Format a byte count the way file managers do: "512 B", "1.5 KiB", "3.0 GiB".

    Use powers of 1024 and one decimal for every unit above bytes.
    """
''',
    '''def snake_case(name: str) -> str:
    """Convert a CamelCase or mixedCase identifier to snake_case.

    Runs of capitals stay together: "HTTPServerError" -> "http_server_error",
    "parseURL" -> "parse_url", "already_snake" is unchanged.
    """
''',
    '''def mask_email(address: str) -> str:
    """Hide most of an e-mail address for display: "jonathan@example.org" -> "j******n@example.org".

    Local parts of one or two characters become a single "*".  Raise ValueError
    when the address has no "@".
    """
''',
    '''from itertools import islice
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Yield lists of size consecutive items; the last list may be shorter.  Works on any iterable."""
''',
    '''def render_table(rows: list[dict], columns: list[str]) -> str:
    """Render rows as a plain-text table with a header line and a rule under it.

    Each column is as wide as its widest cell; numbers are right-aligned and
    everything else left-aligned; a missing key shows as an empty cell.
    """
''',
    '''def diff_settings(old: dict, new: dict) -> dict[str, list]:
    """Compare two settings dicts (nested dicts allowed) key by key.

    Return {"added": [...], "removed": [...], "changed": [...]} where each list
    holds dotted key paths such as "server.port", sorted.
    """
''',
)
