"""Drawing from the workload's distributions: `Weighted` choices and `Zipf` ranks, from any uniform source.

`Weighted(pairs)` picks an item with probability proportional to its weight by bisecting the cumulative
weights. `Zipf(n, exponent)` draws ranks 1..n with P(k) proportional to k**-exponent. Setting it up is a few
arithmetic operations whatever n is (no cumulative table of a million entries), and a draw costs one
uniform variate, one logarithm and one exponential, plus the same again in the rare rejections.

How it works: the continuous hat density h(x) = x**-exponent is integrated in closed form (H below)
and inverted (H_inv), so a uniform variate in H's range maps to a point x of the hat; x is rounded to
the rank k = round(x). Rank k owns the stretch of H's range that maps into [k - 1/2, k + 1/2], which is
at least h(k) wide because h is convex; the draw is accepted when it falls into the top h(k) of that
stretch, which makes the accepted ranks exactly proportional to h(k). Rank 1 owns a stretch of exactly
h(1) (the range starts there), so it is never rejected. Most draws are accepted by a cheap squeeze
test (x close enough below k) without evaluating H again.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, Generic, Iterable, TypeVar

T = TypeVar("T")


class Weighted(Generic[T]):
    """A fixed discrete distribution over items, each with a non-negative weight (not all zero)."""

    __slots__ = ("items", "_cumulative")

    def __init__(self, pairs: Iterable[tuple[T, float]]) -> None:
        pairs = list(pairs)
        total = math.fsum(weight for _, weight in pairs)
        if not pairs or min(weight for _, weight in pairs) < 0 or not total > 0:
            raise ValueError("weights must be non-negative and not all zero")
        self.items: tuple[T, ...] = tuple(item for item, _ in pairs)
        running, cumulative = 0.0, []
        for _, weight in pairs:
            running += weight
            cumulative.append(running / total)
        # A uniform variate is below 1.0, so forcing the last bound to 1.0 keeps every draw in range.
        cumulative[-1] = 1.0
        self._cumulative = cumulative

    def pick(self, uniform: Callable[[], float]) -> T:
        """One item; `uniform` returns floats in [0, 1)."""
        return self.items[bisect.bisect_right(self._cumulative, uniform())]


class Zipf:
    """Sampler of ranks 1..n, P(k) proportional to k**-exponent (exponent > 0)."""

    __slots__ = ("n", "exponent", "_q", "_low", "_high", "_squeeze")

    def __init__(self, n: int, exponent: float) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1, not {n}")
        if not exponent > 0:
            raise ValueError(f"the exponent must be positive, not {exponent}")
        self.n = n
        self.exponent = float(exponent)
        self._q = 1.0 - self.exponent
        self._low = self._integral(1.5) - 1.0
        self._high = self._integral(n + 0.5)
        # Any x with k - x <= squeeze lies in rank k's accepted part (the gap grows with k; k = 2 is tightest).
        self._squeeze = 2.0 - self._inverse(self._integral(2.5) - 2.0 ** -self.exponent)

    def _integral(self, x: float) -> float:
        """H(x): the integral of t**-exponent from 1 to x."""
        log_x = math.log(x)
        if self._q == 0.0:
            return log_x
        return math.expm1(self._q * log_x) / self._q

    def _inverse(self, y: float) -> float:
        """H_inv(y): the x with H(x) = y."""
        if self._q == 0.0:
            return math.exp(y)
        return math.exp(math.log1p(self._q * y) / self._q)

    def sample(self, uniform: Callable[[], float]) -> int:
        """One rank; `uniform` returns floats in [0, 1) (e.g. a seeded `random.Random().random`)."""
        low, high, n = self._low, self._high, self.n
        while True:
            u = high + uniform() * (low - high)
            x = self._inverse(u)
            k = int(x + 0.5)
            if k < 1:
                k = 1
            elif k > n:
                k = n
            if k - x <= self._squeeze or u >= self._integral(k + 0.5) - k ** -self.exponent:
                return k
