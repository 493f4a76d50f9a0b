"""`keras-transformer translate`: texts, or stdin lines a chunk at a time, to translations (the best,
n-best lists, samples, alternatives or word alignments); every check of what the flags ask is the
library's (`Translator`), not this module's."""

from __future__ import annotations

import itertools
import json
import sys

from keras_transformer.cli import common


def add(subparsers):
    p = subparsers.add_parser("translate", help="translate TEXT arguments, or stdin lines, one per line")
    common.add_model_dirs(p)
    common.add_decoding(p)
    common.add_op_threads(p)
    common.add_target_lang(p, "the language to translate into")
    prefix = p.add_mutually_exclusive_group()
    prefix.add_argument("--prefix", metavar="TEXT", help="every translation continues this start of a translation")
    prefix.add_argument("--prefix-file", metavar="FILE", help="one target prefix per input line, in order")
    constraint = p.add_mutually_exclusive_group()
    constraint.add_argument(
        "--constraint", action="append", metavar="PHRASE", help="every translation holds PHRASE (repeat for more)"
    )
    constraint.add_argument(
        "--constraints", metavar="FILE", help="one line per input line: its phrases, tab-separated (empty: none)"
    )
    common.add_glossary(p, "each translation holds the target terms of the terms its input holds")
    p.add_argument(
        "--strict-input",
        action="store_true",
        help="a stdin line that is not UTF-8 is an error (default: its bad bytes become U+FFFD, with a warning)",
    )
    output = p.add_mutually_exclusive_group()  # what is printed: the translation's alignments or alternatives
    output.add_argument(
        "--alignments",
        action="store_true",
        help="after a tab on each line, the word alignment in Pharaoh format (source-target word indices: 0-0 2-1)",
    )
    output.add_argument(
        "--scores",
        action="store_true",
        help="one JSON line per input: the translation, its confidence (the geometric mean of its token "
        "probabilities), each word's score and the failure flags (repetition, length_ratio, uncovered, empty)",
    )
    p.add_argument(
        "--no-split",
        dest="split",
        action="store_false",
        help="translate each input as one sentence (default: as a document, sentence by sentence, the "
        "whitespace between them kept, a sentence too long for the model cut at its best boundary; "
        "--nbest, --num-samples, --alternatives, --alignments, --prefix and --constraint always take one sentence)",
    )
    p.add_argument(
        "--markup",
        choices=("on", "off"),
        default="on",
        help="on (default): an input's tags, entities, placeholders (%%s, {name}, $HOME), URLs and e-mail addresses "
        "come out exactly, placed by the word alignments (without the glossary); for 1-best translations without "
        "--prefix, --constraint, --target-lang. off: translated as text",
    )
    output.add_argument(
        "--alternatives",
        type=int,
        metavar="N",
        help="the N most likely words after the --prefix (or at the start), each continued to a whole translation "
        "(autocompletion; CTranslate2's return_alternatives): N lines INDEX<TAB>SCORE<TAB>TEXT per input",
    )
    p.add_argument(
        "text",
        nargs="*",
        help="texts (documents: see --no-split); none: stdin, one per line, streamed "
        "(--nbest N, --num-samples N: INDEX<TAB>SCORE<TAB>TEXT)",
    )


def _lines(path: str):
    """The lines of a UTF-8 text file, without their line ends, one at a time."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\r\n")


def _matched(batches, path: str, flag: str, parse=None):
    """Each batch (inputs, ...) with the lines of the file `path` (of `flag`: one line per input) that
    go with its inputs, `parse(number, line)`d: (inputs, ..., [line, ...]). The file is read along
    with the inputs, a batch at a time, never whole; a ValueError naming both counts when the file
    or the inputs end first (after the batches before)."""
    lines = enumerate(_lines(path), 1)
    done = 0
    for batch in batches:
        inputs = len(batch[0])
        matched = [parse(number, line) if parse else line for number, line in itertools.islice(lines, inputs)]
        if len(matched) < inputs:
            total = done + inputs + sum(len(rest[0]) for rest in batches)
            raise ValueError(f"{flag} {path} has {done + len(matched)} lines for {total} inputs")
        done += inputs
        yield (*batch, matched)
    extra = sum(1 for _ in lines)
    if extra:
        raise ValueError(f"{flag} {path} has {done + extra} lines for {done} inputs")


def run(args):
    from keras_transformer.translation.alignment import format_pharaoh
    from keras_transformer.translation.pipeline import Request

    common.use_op_threads(args.intra_op_threads)
    translator = common.build_translator(args)
    lines = common.decoded_lines(common.stdin_lines(), args.strict_input)
    texts = [args.text] if args.text else common.chunks(lines, common.STDIN_CHUNK)
    if args.prefix_file:  # one prefix per input, read along with the inputs
        batches = _matched(((chunk,) for chunk in texts), args.prefix_file, "--prefix-file")
    else:
        batches = ((chunk, args.prefix) for chunk in texts)
    batches = _constraints(args, batches)  # (inputs, prefixes, constraints)
    decoding = translator.decoding
    n = decoding.sampling.num_samples if decoding.sampling else decoding.search.nbest or 1  # 1: one line per input
    if args.alignments:  # of the one best translation: --nbest or --num-samples refused by the library's check
        Request(n, alignments=True).check(decoding)
    if args.scores:
        if n > 1:
            raise ValueError("--scores scores the best translation of each input: drop --nbest, --num-samples")
        if len(args.model_dir) == 1:
            translator.length_ratio = common.training_length_ratio(args.model_dir[0])
    index = 0
    for chunk, prefixes, constraints in batches:  # each chunk sorted by length inside the translator, in input order
        inputs = dict(prefixes=prefixes, constraints=constraints, target_lang=args.target_lang)
        if args.alternatives is not None:
            _print_hypotheses(index, translator.translate_alternatives(chunk, args.alternatives, **inputs))
        elif args.alignments:
            for translation, pairs in translator.translate_with_alignments(chunk, **inputs):
                print(f"{translation}\t{format_pharaoh(pairs)}")
        elif args.scores:
            plain = all(value is None for value in inputs.values())
            split = args.split and prefixes is None and constraints is None
            options = dict(markup=args.markup == "on" and plain, split=split, return_scores=True)
            for scored in translator.translate(chunk, **inputs, **options):
                print(json.dumps(scored.to_dict(), ensure_ascii=False))
        elif n == 1 and args.markup == "on" and all(value is None for value in inputs.values()):
            for translation in translator.translate(chunk, markup=True, split=args.split):
                print(translation)
        elif n == 1:
            split = args.split and prefixes is None and constraints is None  # a document: sentence by sentence
            for translation in translator.translate(chunk, **inputs, split=split):
                print(translation)
        else:
            _print_hypotheses(index, translator.translate_nbest(chunk, **inputs))
        index += len(chunk)
        sys.stdout.flush()


def _print_hypotheses(first: int, hypotheses) -> None:
    """INDEX<TAB>SCORE<TAB>TEXT lines of each input's hypotheses, its index counted from `first`."""
    for k, texts in enumerate(hypotheses):
        for translation, score in texts:
            print(f"{first + k}\t{score:.4f}\t{translation}")


def _constraints(args, batches):
    """Each batch (inputs, prefixes) with the phrases its translations hold: --constraint's, one list
    for all inputs; a --constraints file's lines, one per input, read along with the inputs; or None."""
    if args.constraint:
        for phrase in args.constraint:
            if not phrase.strip():
                raise ValueError("--constraint: an empty phrase")
        return ((*batch, list(args.constraint)) for batch in batches)
    if not args.constraints:
        return ((*batch, None) for batch in batches)

    def phrases(number: int, line: str) -> list[str]:
        phrases = line.split("\t") if line else []
        if any(not phrase.strip() for phrase in phrases):
            raise ValueError(f"--constraints {args.constraints}:{number}: an empty phrase (phrases are tab-separated)")
        return phrases

    return _matched(batches, args.constraints, "--constraints", phrases)
