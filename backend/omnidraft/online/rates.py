"""Acceptance rates with their counts, and when a rate means nothing.

An acceptance rate over a handful of drafted tokens is noise: 1 of 2 is "50 %", 2 of 2 is "100 %".
Below ``MIN_DRAFTED`` drafted (proposed) tokens a rate is reported as unmeasured: shown with its counts
but no percentage, and left out of plots.  50 keeps the binomial standard error of a rate near 40-50 %
under 7 percentage points (sqrt(0.25 / 50) = 0.071), about the size of the gains we look for; with
fewer, one more accepted token moves the rate by over 2 points.
"""

from __future__ import annotations

MIN_DRAFTED = 50


def measured(proposed: int) -> bool:
    """True if a rate over ``proposed`` drafted tokens means something."""
    return proposed >= MIN_DRAFTED


def acceptance_text(accepted: int, proposed: int) -> str:
    """'42.0 % (84/200 drafted)', or 'not measured (3/4 drafted, < 50)' below MIN_DRAFTED."""
    if not measured(proposed):
        return f"not measured ({accepted}/{proposed} drafted, < {MIN_DRAFTED})"
    return f"{100 * accepted / proposed:.1f} % ({accepted}/{proposed} drafted)"
