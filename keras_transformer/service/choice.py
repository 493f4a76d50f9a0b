"""Which artifact of an export `serve --export DIR` runs by default: the fastest whose BLEU is within
BLEU_TOLERANCE of the float SavedModel's (issue 52), as `bench/serving.py choose` measured them and
wrote to DIR/serving_choice.json:

    {"choice": "tflite", "tolerance_bleu": 0.5,
     "artifacts": {"saved_model": {"sentences_per_s": 41.2, "bleu": 12.3}, "tflite": {...}, ...}}

Without that file `serve` runs the float SavedModel, and says so.
"""

from __future__ import annotations

import json
import os

CHOICE = "serving_choice.json"
FLOAT = "saved_model"
BLEU_TOLERANCE = 0.5
ARTIFACTS = ("saved_model", "saved_model_int8", "tflite", "tflite_int8")


def choose(figures: dict[str, dict], tolerance: float = BLEU_TOLERANCE) -> str:
    """The artifact of `figures` ({artifact: {"sentences_per_s", "bleu"}}, the float SavedModel's among
    them) with the most sentences per second among those whose BLEU is at least the float one's
    minus `tolerance`."""
    if FLOAT not in figures:
        raise ValueError(f"no figures of the float SavedModel ({FLOAT}) to compare with")
    floor = figures[FLOAT]["bleu"] - tolerance
    kept = {name: found for name, found in figures.items() if found["bleu"] >= floor}
    return max(kept, key=lambda name: kept[name]["sentences_per_s"])


def write_choice(export_dir: str, figures: dict[str, dict], tolerance: float = BLEU_TOLERANCE, **about) -> dict:
    """DIR/serving_choice.json: `choose(figures)`, the figures and `about` (how they were measured)."""
    record = {"choice": choose(figures, tolerance), "tolerance_bleu": tolerance, "artifacts": figures, **about}
    with open(os.path.join(export_dir, CHOICE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return record


def read_choice(export_dir: str) -> str | None:
    """The artifact DIR/serving_choice.json chose, None where there is no such file; a ValueError of
    one line for a file that names no known artifact."""
    path = os.path.join(export_dir, CHOICE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            choice = json.load(f).get("choice")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(f"{path}: not a serving choice ({' '.join(str(error).split())})") from None
    if choice not in ARTIFACTS:
        raise ValueError(f"{path}: choice {choice!r} is not an artifact ({', '.join(ARTIFACTS)})")
    return choice
