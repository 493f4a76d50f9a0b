"""Source-side noise for back-translated sentences (Edunov et al., 2018, "Understanding
Back-Translation at Scale", §2.1 and §5.1): each word deleted with probability 0.1, replaced by a
filler token with probability 0.1, and the words permuted with no word moving more than three
positions (Lample et al., 2018, §2.3: sort by i + U(0, k + 1), which moves none further than k).

Reproducible: the draws of a sentence come from `random.Random` seeded with the run's seed and
the sentence's id, so the same seed gives the same noise wherever and in whatever order a
pipeline's workers reach the sentence.
"""

from __future__ import annotations

import random

DROP = 0.1
BLANK = 0.1
SWAP_DISTANCE = 3
FILLER = "<blank>"  # keep it one piece: `train --user-symbols '<blank>'`


def noised(text: str, seed: int, key: str, filler: str = FILLER) -> str:
    """`text`'s words (split on whitespace) dropped, blanked and shuffled locally as the module
    docstring says, drawn from `seed` and `key` (the sentence's id)."""
    rng = random.Random(f"{seed}:{key}")
    words = []
    for word in text.split():
        draw = rng.random()
        if draw < DROP:
            continue
        words.append(filler if draw < DROP + BLANK else word)
    order = sorted(range(len(words)), key=lambda i: i + rng.uniform(0, SWAP_DISTANCE + 1))
    return " ".join(words[i] for i in order)
