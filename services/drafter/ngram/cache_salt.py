"""A salted request's corner of the shared memory (vLLM's `cache_salt`).

A request with a cache salt must neither read what other requests taught the memory nor leave its own
text where requests without that salt would draft from it: acceptance rates would tell one tenant
about another's outputs. So every context a salted request writes or looks up is prefixed with its
salt's marker: four uint32s of a BLAKE2b digest of the salt, each at or above 2**31, where no
vocabulary's token ids reach. Contexts of different salts, or with and without one, never meet, yet
they live in the same memory under its one capacity and TTL. A request's own history (its prompt and
output) is matched as before. The drafter's acceptance estimates (calibration.py) stay drafter-wide:
rates per kind of match, which hold no text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from treespec.drafter.ngram.memory import Context, Observation

MARKER_BASE = 2**31  # salt markers lie at or above it: above every token id
MARKER_WORDS = 4  # 124 bits of the digest: no two salts share a corner by chance


def salt_marker(salt: str) -> Context:
    """The prefix of a salted request's contexts; () without a salt."""
    if not salt:
        return ()
    digest = hashlib.blake2b(salt.encode(), digest_size=4 * MARKER_WORDS).digest()
    words = (int.from_bytes(digest[4 * i : 4 * i + 4], "little") for i in range(MARKER_WORDS))
    return tuple(MARKER_BASE | (word >> 1) for word in words)


def salted(marker: Context, observations: Sequence[Observation]) -> Sequence[Observation]:
    """`observations` under the salt's marker (unchanged without one)."""
    if not marker:
        return observations
    return [(marker + context, continuation) for context, continuation in observations]
