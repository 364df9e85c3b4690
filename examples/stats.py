"""Small statistics helpers: the sample file `make demo` completes."""

import math


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)


def variance(values):
    """Population variance of a non-empty sequence."""
    center = mean(values)
    return sum((x - center) ** 2 for x in values) / len(values)


def standard_deviation(values):
    """Population standard deviation of a non-empty sequence."""
    return math.
