"""Cleaning as a Beam stage: `pairs | CleanPairs(config)` on (id, (source, target)) elements gives
the kept pairs and the dropped ones as (id, filter name), with the filters of `cleaning` (one
implementation): `pair_fault` per pair; the duplicates by grouping on their keys, the pair with
the lowest id (file name, then line number) of each group kept, as `clean` keeps the first. The
scripts, when `config.scripts` is None, are learned from a sample of `SCRIPT_SAMPLE` pairs.
Each filter's drops are counted (Beam counters "clean_<filter>")."""

from __future__ import annotations

import apache_beam as beam

from keras_transformer.corpus import beam_io
from keras_transformer.corpus.backtranslate import line_order
from keras_transformer.corpus.cleaning import (
    SCRIPT_SAMPLE,
    CleaningConfig,
    exact_key,
    learn_scripts,
    near_key,
    pair_fault,
)

DROPPED = "dropped"


def _dropped(line_id: str, reason: str):
    beam_io.count(f"clean_{reason}")
    return beam.pvalue.TaggedOutput(DROPPED, (line_id, reason))


class _Judge(beam.DoFn):
    def __init__(self, config: CleaningConfig):
        self.config = config

    def process(self, element, scripts):
        line_id, (source, target) = element
        reason = pair_fault(source, target, self.config, tuple(scripts))
        yield _dropped(line_id, reason) if reason else element


class _FirstOfEach(beam.DoFn):
    """(key, [(id, pair), ...]) -> the one of lowest id; the others dropped as `reason`."""

    def __init__(self, reason: str):
        self.reason = reason

    def process(self, group):
        first, *rest = sorted(group[1], key=lambda element: line_order(element[0]))
        yield first
        for line_id, _ in rest:
            yield _dropped(line_id, self.reason)


class CleanPairs(beam.PTransform):
    """(id, (source, target)) -> {"kept": (id, (source, target)), `DROPPED`: (id, filter)}."""

    def __init__(self, config: CleaningConfig = CleaningConfig()):
        super().__init__()
        self.config = config

    def expand(self, pairs):
        if self.config.scripts:
            scripts = beam.pvalue.AsSingleton(pairs.pipeline | "Scripts" >> beam.Create([self.config.scripts]))
        else:
            scripts = beam.pvalue.AsSingleton(
                pairs
                | "Sample" >> beam.combiners.Sample.FixedSizeGlobally(SCRIPT_SAMPLE)
                | "Learn scripts" >> beam.Map(lambda sample: learn_scripts(pair for _, pair in sample))
            )
        judged = pairs | "Judge" >> beam.ParDo(_Judge(self.config), scripts).with_outputs(DROPPED, main="kept")
        dropped = [judged[DROPPED]]
        kept = judged.kept
        for name, key in (("duplicate", exact_key), ("near_duplicate", near_key)):
            grouped = (
                kept
                | f"Key {name}" >> beam.Map(lambda element, key=key: (key(*element[1]), element))
                | f"Group {name}" >> beam.GroupByKey()
                | f"First {name}" >> beam.ParDo(_FirstOfEach(name)).with_outputs(DROPPED, main="kept")
            )
            kept = grouped.kept
            dropped.append(grouped[DROPPED])
        return {"kept": kept, DROPPED: tuple(dropped) | "Dropped" >> beam.Flatten()}
