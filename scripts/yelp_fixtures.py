"""The Yelp fixture writer (AttConv Table 3) that ``make_fixtures.py`` (``make fixtures``) calls: a ``review.json``
in the Yelp Dataset Challenge's format and the split files made from it. Synthetic reviews written by this project,
fixed seed: re-running rewrites identical files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from coda_exp.io import atomic_write_text

# ---- Yelp (AttConv Table 3): a review.json of the Yelp Dataset Challenge, and the split files made from it by
# ---- scripts/make_yelp_split.py's function (the fixture is its output: a test regenerates it)

YELP_WORDS = {1: ["awful", "rude", "cold", "never again"], 2: ["bland", "slow", "overpriced", "disappointing"],
              3: ["okay", "average", "fine", "decent enough"], 4: ["good", "friendly", "tasty", "would return"],
              5: ["amazing", "perfect", "delicious", "best in town"]}
YELP_THINGS = ["the pizza", "our waiter", "the coffee", "the tacos", "the service", "the patio", "my burger"]
YELP_SPLIT = {"sizes": (60, 20, 20), "seed": 1234}  # the fixture's split of its 110 reviews


def yelp_reviews(rng: random.Random, n: int = 110) -> list[dict]:
    """Review rows with the fields of review.json; a few very short texts (dropped by data.min_words=4), some
    line breaks and stars written as floats (as recent releases do)."""
    rows = []
    for k in range(n):
        stars = k % 5 + 1
        if k % 23 == 7:
            text = f"{rng.choice(YELP_WORDS[stars]).split()[0].capitalize()}!"
        else:
            w = YELP_WORDS[stars]
            text = (f"{rng.choice(YELP_THINGS).capitalize()} was {rng.choice(w)}, and {rng.choice(YELP_THINGS)} "
                    f"was {rng.choice(w)}.\n\nOverall: {rng.choice(w)} ({stars}/5) - we'll see.")
        rows.append({"review_id": f"r{k:05d}", "user_id": f"u{rng.randrange(40):03d}",
                     "business_id": f"b{rng.randrange(12):03d}", "stars": float(stars) if k % 2 else stars,
                     "useful": rng.randrange(3), "funny": 0, "cool": rng.randrange(2), "text": text,
                     "date": f"2018-0{k % 9 + 1}-1{k % 10} 12:00:00"})
    return rows


def write_yelp(out: Path) -> list[Path]:
    from coda_exp.data.text.yelp import write_split

    folder = out / "yelp"
    review_json = atomic_write_text(folder / "review.json", "".join(
        json.dumps(r) + "\n" for r in yelp_reviews(random.Random(2017))))
    return [review_json, *write_split(review_json, folder, **YELP_SPLIT)]
