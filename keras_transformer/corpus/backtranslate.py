"""`backtranslate`: synthetic training pairs from monolingual target-language text (Sennrich et
al., 2016, "Improving Neural Machine Translation Models with Monolingual Data"), on Apache Beam.

A reverse model (target -> source) translates each line of MONO.txt; the pair written is
`synthetic source<TAB>original line`. Its decoding is the model dir's (beam search), or top-k /
unrestricted sampling (`sampling_topk`), which Edunov et al. (2018, "Understanding Back-Translation
at Scale", §5) found better than beam search once there is much synthetic data; optional
source-side noise (`noise.noised`, their §2.1); an optional tag before the synthetic source
(Caswell et al., 2019, "Tagged Back-Translation"), e.g. `<BT>`, which training keeps as one piece
when it learns the vocabulary with `--user-symbols '<BT>'`. Train on real and synthetic pairs with
the weighted-sources syntax: `train --data bible-en-de:0.7,bt.tsv:0.3`.

Reproducible with a seed: lines go to the model in fixed chunks of `CHUNK` lines of one file (not
in Beam's batches, which depend on timing), each chunk one `Translator` call sampled with the seed
as `translate` samples, and the noise of a line is drawn from the seed and the line's id.
The output's order is the runner's; a line that cannot be used (not UTF-8, over the size limit,
empty, holding a tab, or one the model fails on or translates with a tab or a line break) goes to
OUTPUT.failed-SSSSS-of-NNNNN as `ID<TAB>reason`.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference

from keras_transformer.corpus import beam_io
from keras_transformer.corpus.handlers import ModelDirHandler
from keras_transformer.corpus.noise import noised

CHUNK = 64  # lines per model call


def line_order(line_id: str) -> tuple[str, int]:
    """("news.txt", 17) of "news.txt:17": the input's order (a string sort puts 10 before 9)."""
    name, _, number = line_id.rpartition(":")
    return name, int(number)


@beam.typehints.with_output_types(tuple[str, tuple[str, str]])  # the main output's (a dead letter's is tagged)
class ParseMono(beam.DoFn):
    """(id, raw line) -> ("file:chunk", (id, text)), or a dead letter."""

    def __init__(self, max_line_bytes: int):
        self.max_line_bytes = max_line_bytes

    def process(self, element):
        line_id, raw = element
        text, reason = beam_io.line_fault(raw, self.max_line_bytes)
        if not reason and not text.strip():
            reason = "empty line"
        if not reason and "\t" in text:
            reason = "a tab in the line (the output is TSV)"
        if reason:
            yield beam_io.dead_letter(line_id, reason)
            return
        name, number = line_order(line_id)
        yield f"{name}:{(number - 1) // CHUNK}", (line_id, text)


class SyntheticPairs(beam.DoFn):
    """PredictionResult((chunk, [(id, line), ...]), [(translation, reason), ...]) -> "source<TAB>line"
    per line (noised with `seed` if `noise`, tagged with `tag`), or dead letters."""

    def __init__(self, tag: str | None, noise: bool, seed: int):
        self.tag, self.noise, self.seed = tag, noise, seed

    def process(self, result):
        for (line_id, line), (translation, reason) in zip(result.example[1], result.inference):
            if not reason and "\t" in translation:
                reason = "a tab in the translation"
            reason = reason or beam_io.output_fault(translation)
            if reason:
                yield beam_io.dead_letter(line_id, reason)
                continue
            source = noised(translation, self.seed, line_id) if self.noise else translation
            beam_io.count("pairs")
            yield f"{self.tag} {source}\t{line}" if self.tag else f"{source}\t{line}"


def build(
    pipeline,
    pattern: str,
    output: str,
    model_dir: str,
    *,
    tag: str | None = None,
    noise: bool = False,
    seed: int = 0,
    max_line_bytes: int = beam_io.MAX_LINE_BYTES,
    **decoding,
) -> None:
    """The back-translation pipeline on `pipeline`: OUTPUT (one file) and its dead letters.
    `decoding`: `DecodingConfig` overrides for the reverse model (`sampling_topk`, `beam_size`);
    sampling draws with `seed`."""
    if decoding.get("sampling_topk", 1) != 1:
        decoding["seed"] = seed
    parsed = (
        pipeline
        | "Read" >> beam_io.ReadNumberedLines(pattern)
        | "Parse" >> beam.ParDo(ParseMono(max_line_bytes)).with_outputs(beam_io.FAILED, main="lines")
    )
    chunks = (
        parsed.lines
        | "Chunk" >> beam.GroupByKey()
        | "Order" >> beam.MapTuple(lambda chunk, lines: (chunk, sorted(lines, key=lambda line: line_order(line[0]))))
    )
    results = chunks | "Back-translate" >> RunInference(ModelDirHandler(model_dir, **decoding))
    pairs = results | "Pairs" >> beam.ParDo(SyntheticPairs(tag, noise, seed)).with_outputs(beam_io.FAILED, main="pairs")
    pairs.pairs | "Write" >> beam.io.WriteToText(output, shard_name_template="", num_shards=1)
    failed = (parsed[beam_io.FAILED], pairs[beam_io.FAILED]) | "Failures" >> beam.Flatten()
    beam_io.write_sharded(failed | "Format failures" >> beam.MapTuple(beam_io.tsv_line), output + ".failed", "Fails")


def backtranslate(pattern: str, output: str, model_dir: str, beam_args=(), **options) -> dict:
    """Run `build` with Beam's options `beam_args`; its counters ({"pairs": N, "failed": M})."""
    pipeline = beam.Pipeline(options=beam_io.pipeline_options(list(beam_args)))
    build(pipeline, pattern, output, model_dir, **options)
    result = pipeline.run()
    result.wait_until_finish()
    return {"pairs": 0, "failed": 0, **beam_io.counters(result)}
