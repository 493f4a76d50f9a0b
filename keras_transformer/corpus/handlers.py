"""RunInference model handlers (Apache Beam's `ModelHandler`) for our translators.

Beam's own TensorFlow handlers load with `tf.keras.models.load_model`, which Keras 3 refuses on a
bare SavedModel, so these load the export with `SavedModelTranslator` (its text signatures:
`serving_default`, `translate_document`, `translate_markup`; the glossary is inside the export)
or a model dir with `Translator.from_model_dir` (back-translation's sampling and beam settings).

An example is `(id, text)`; an inference is `(translation, None)`, or `(None, reason)` when the
model fails on the text: a batch that raises is translated again text by text, so one bad text
costs its own line (to the dead letters), never its batch's. Several language pairs:
`keyed_handler({"en-de": ExportHandler(...), "en-fr": ExportHandler(...)})`, a `KeyedModelHandler`
that routes each `(pair, (id, text))` to its pair's export (`KeyModelMapping`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from apache_beam.ml.inference.base import KeyedModelHandler, KeyModelMapping, ModelHandler, PredictionResult

MODES = ("sentences", "documents", "markup")  # what a text is: -> serving_default, translate_document, translate_markup
BATCH_SIZE = 64  # examples per RunInference batch (the translator sorts them by length inside)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def translate_each(translate: Callable[[list[str]], list[str]], texts: list[str]) -> list[tuple]:
    """(translation, None) per text by `translate` on them all, or, when that raises, on each
    alone: (None, "model error: ...") for a text that raises by itself."""
    try:
        return [(translation, None) for translation in translate(texts)]
    except Exception:  # noqa: BLE001  a model's errors are of many types; each text's own is kept below
        pass
    outcomes = []
    for text in texts:
        try:
            outcomes.append((translate([text])[0], None))
        except Exception as error:  # noqa: BLE001
            outcomes.append((None, f"model error: {first_line(error)}"))
    return outcomes


class ExportHandler(ModelHandler):
    """An exported SavedModel (`keras-transformer export`'s OUT or a SavedModel dir; the int8 one
    with `int8`) translating `(id, text)` examples as `mode` says (`MODES`)."""

    def __init__(self, export_dir: str, *, int8: bool = False, mode: str = "sentences", batch_size: int = BATCH_SIZE):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        super().__init__(min_batch_size=1, max_batch_size=batch_size)
        self.export_dir, self.int8, self.mode = export_dir, int8, mode

    def load_model(self):
        from keras_transformer.translation.exported import SavedModelTranslator

        return SavedModelTranslator(self.export_dir, int8=self.int8)

    def run_inference(self, batch: Sequence[tuple[str, str]], model, inference_args=None):
        options = {"markup": self.mode == "markup", "split": self.mode == "documents"}
        outcomes = translate_each(lambda texts: model.translate(texts, **options), [text for _, text in batch])
        return [PredictionResult(example, outcome) for example, outcome in zip(batch, outcomes)]

    def get_metrics_namespace(self) -> str:
        return "keras_transformer_export"


class ModelDirHandler(ModelHandler):
    """A model dir's `Translator` with `DecodingConfig` overrides (`sampling_topk`, `beam_size`,
    `seed`, ...), translating chunks: an example is `(chunk id, [(id, text), ...])`, translated in
    one call (so a seeded sampling run gives each chunk the same draws wherever it runs), its
    inference one `(translation, reason)` per text."""

    def __init__(self, model_dir: str, **overrides):
        super().__init__(min_batch_size=1, max_batch_size=1)
        self.model_dir, self.overrides = model_dir, overrides

    def load_model(self):
        from keras_transformer.translation.translator import Translator

        return Translator.from_model_dir(self.model_dir, **self.overrides)

    def run_inference(self, batch, model, inference_args=None):
        return [
            PredictionResult(chunk, translate_each(model.translate, [text for _, text in chunk[1]])) for chunk in batch
        ]

    def get_metrics_namespace(self) -> str:
        return "keras_transformer_model_dir"


def keyed_handler(handlers: Mapping[str, ModelHandler]) -> KeyedModelHandler:
    """A `KeyedModelHandler` routing `(key, example)` to `handlers[key]`, one `KeyModelMapping` each."""
    return KeyedModelHandler([KeyModelMapping([key], handler) for key, handler in handlers.items()])
