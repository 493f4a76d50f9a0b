"""The languages a model reads and writes, and language detection for `source=auto`.

Detection uses lingua (Stahl, lingua-py: n-gram models of 1-5 characters, offline), restricted to
the model's source and target languages plus `COMMON`, so that its models stay small in memory and a
text in a common language the model does not read is recognised as such. Each item of a batch is
detected on its own (a mixed batch is no problem: LibreTranslate#395, #779). A text too short or too
ambiguous to tell (lingua's minimum relative distance) is taken to be in the model's source language.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from keras_transformer.config import language_pair

# Languages detection tells apart besides the model's own (ISO 639-1): the most used on the web.
COMMON = ("en", "de", "fr", "es", "it", "pt", "nl", "pl", "ru", "tr", "sv", "zh", "ja", "ar")
# lingua's minimum relative distance between the best two languages: below it, no language is named.
MIN_RELATIVE_DISTANCE = 0.1


@dataclasses.dataclass(frozen=True)
class Languages:
    """What a model translates: from `source` into each of `targets` (ISO 639-1 codes); `multilingual`:
    the model picks its target by a language token (`Translator.translate(..., target_lang=...)`)."""

    source: str
    targets: tuple[str, ...]
    multilingual: bool = False

    def listing(self) -> list[dict]:
        """LibreTranslate's `GET /languages`: [{code, name, targets}], the source first."""
        names = {code: name_of(code) for code in (self.source, *self.targets)}
        entries = [{"code": self.source, "name": names[self.source], "targets": list(self.targets)}]
        return entries + [{"code": t, "name": names[t], "targets": []} for t in self.targets if t != self.source]


def name_of(code: str) -> str:
    """ "de" -> "German" (lingua's names), the code itself where lingua has none."""
    from lingua import IsoCode639_1, Language

    try:
        return Language.from_iso_code_639_1(IsoCode639_1.from_str(code)).name.title()
    except ValueError:
        return code


def model_dir_languages(path: str, pair: str | None = None) -> Languages:
    """The `Languages` of a model directory: its data config's language pair (`config.language_pair`,
    reversed where the model was trained reversed) and a multilingual model's target languages;
    `pair` ("en-de") overrides what the names say. ValueError where neither says the source."""
    from keras_transformer.model_dir import ModelDir

    values = ModelDir(path).read()
    data = values["data_config"]
    found = language_pair(pair or "") or language_pair(data.data)
    if found is None:
        raise ValueError(f"{path}'s data ({data.data!r}) names no language pair: pass --languages SRC-TGT, e.g. en-de")
    source, target = found if pair or not data.reverse else found[::-1]
    targets = tuple(values.get("target_langs", ())) if not pair else ()
    return Languages(source, targets or (target,), multilingual=bool(targets))


def export_languages(path: str, pair: str | None = None) -> Languages:
    """The `Languages` of an export dir (`keras-transformer export`): those of the model dir its
    translator.json names, or `pair`."""
    if pair:
        source, target = language_pair(pair) or (None, None)
        if source is None:
            raise ValueError(f"--languages must be SRC-TGT (ISO 639 codes, e.g. en-de), got {pair!r}")
        return Languages(source, (target,))
    with open(os.path.join(path, "translator.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    model_dirs = metadata.get("model_dirs") or []
    if not model_dirs or not os.path.isdir(model_dirs[0]):
        raise ValueError(f"{path}/translator.json names no model dir that exists here: pass --languages SRC-TGT")
    return model_dir_languages(model_dirs[0])


class Detector:
    """lingua's detector over the model's languages and `COMMON`, built on first use (lingua loads its
    models lazily, a few seconds on first detection); thread-safe."""

    def __init__(self, languages: Languages):
        self.languages = languages
        self._detector = None
        self._lock = threading.Lock()

    def _built(self):
        from lingua import IsoCode639_1, LanguageDetectorBuilder

        with self._lock:
            if self._detector is None:
                codes = []
                for code in dict.fromkeys((self.languages.source, *self.languages.targets, *COMMON)):
                    try:
                        codes.append(IsoCode639_1.from_str(code))
                    except ValueError:  # a code lingua does not know: not detected
                        pass
                builder = LanguageDetectorBuilder.from_iso_codes_639_1(*codes)
                self._detector = builder.with_minimum_relative_distance(MIN_RELATIVE_DISTANCE).build()
        return self._detector

    def detect(self, text: str) -> tuple[str, float]:
        """(ISO 639-1 code, confidence in percent as LibreTranslate gives it) of `text`; the model's
        source language, with its confidence, where lingua names none (too short, ambiguous)."""
        detector = self._built()
        found = detector.detect_language_of(text)
        code = self.languages.source if found is None else found.iso_code_639_1.name.lower()
        values = detector.compute_language_confidence_values(text)
        values = {value.language.iso_code_639_1.name.lower(): value.value for value in values}
        return code, round(100.0 * values.get(code, 0.0), 1)
