"""The decoding controls (search/controls.py, CTranslate2's names and semantics) on scripted
models whose next-token distributions are written out, so that each control's effect is known
by hand: each test fails without its control."""

import numpy as np
import pytest
import tensorflow as tf
from test_beam_search import EOS, ScriptedModel, assert_tflite_gives_the_graphs_beams
from test_decoding import model  # noqa: F401  (the shared fixture)

from keras_transformer import DecodingConfig
from keras_transformer.search.decoding import beam_search, greedy_search
from keras_transformer.search.sampling import sample
from keras_transformer.special_tokens import UNK_ID

SOURCE = [[5, 2]]

# A model that loops: after any prefix, 4 then 5 then 4 ... (a repeated bigram "4 5"), EOS rare.
LOOP = lambda prefix: {4: 0.6, EOS: 0.05, 5: 0.35} if not prefix or prefix[-1] == 5 else {5: 0.7, 4: 0.2, EOS: 0.1}


def greedy_ids(model, **settings):
    ids = greedy_search(model, SOURCE, max_decode_length=8, **settings).ids.numpy()[0, 0]
    return [int(t) for t in ids]


def bigrams(ids):
    tokens = [t for t in ids if t not in (0, EOS)]
    return [tuple(tokens[i : i + 2]) for i in range(len(tokens) - 1)]


def test_no_repeat_ngram_size_forbids_a_repeated_bigram():
    looping = greedy_ids(ScriptedModel(LOOP))
    assert looping[:4] == [4, 5, 4, 5]  # without the control: "4 5" twice
    blocked = greedy_ids(ScriptedModel(LOOP), no_repeat_ngram_size=2)
    assert len(bigrams(blocked)) == len(set(bigrams(blocked)))
    # After 4 5 4, the next 5 would repeat "4 5": the second best, EOS (0.1) vs 4 (0.2): 4... then
    # "4 4" is new, and so on; by hand: 4 5 4 4, then after 4: 5 is banned ("4 5"), 4 is banned ("4 4").
    assert blocked[:5] == [4, 5, 4, 4, EOS]


def test_no_repeat_ngram_size_in_beam_search_with_a_fixed_shape_cache():
    result = beam_search(ScriptedModel(LOOP), SOURCE, beam_size=3, alpha=0.0, max_decode_length=8, nbest=3)
    assert any(len(bigrams(row)) != len(set(bigrams(row))) for row in result.ids.numpy()[0])
    blocked = beam_search(
        ScriptedModel(LOOP), SOURCE, beam_size=3, alpha=0.0, max_decode_length=8, nbest=3, no_repeat_ngram_size=2
    )
    for row in blocked.ids.numpy()[0]:
        assert len(bigrams(row)) == len(set(bigrams(row))), row


def test_no_repeat_ngram_size_1_forbids_any_repeated_token():
    ids = greedy_ids(ScriptedModel(LOOP), no_repeat_ngram_size=1)
    tokens = [t for t in ids if t not in (0, EOS)]
    assert tokens == [4, 5] and ids[2] == EOS


UNK_SCRIPT = lambda prefix: {UNK_ID: 0.5, 4: 0.3, EOS: 0.2} if not prefix else {EOS: 0.9, 4: 0.1}


def test_disable_unk_skips_the_unknown_token():
    assert greedy_ids(ScriptedModel(UNK_SCRIPT))[0] == UNK_ID
    assert greedy_ids(ScriptedModel(UNK_SCRIPT), disable_unk=True)[:2] == [4, EOS]


EARLY_EOS = lambda prefix: {EOS: 0.7, 4: 0.3}


def test_min_decoding_length_is_a_floor_under_the_output_length():
    assert greedy_ids(ScriptedModel(EARLY_EOS))[:1] == [EOS]
    ids = greedy_ids(ScriptedModel(EARLY_EOS), min_decoding_length=3)
    assert ids[:4] == [4, 4, 4, EOS]


def test_max_decoding_length_caps_the_output_whatever_the_source():
    ids = greedy_search(ScriptedModel(lambda prefix: {4: 0.9, EOS: 0.1}), SOURCE, max_decoding_length=3).ids
    assert ids.numpy()[0, 0].tolist() == [4, 4, 4]  # ended at the cap, without EOS


def test_the_repetition_penalty_divides_the_logits_of_generated_tokens():
    # Logits: token 4 at 2.0 always, 5 at 1.5: greedy repeats 4. With penalty 2, after one 4 its
    # logit is 1.0 < 1.5, so 5 comes next; after 4 5 both are penalised (1.0, 0.75): 4 again.
    logits = np.full(6, -5.0, np.float32)
    logits[[4, 5, EOS]] = [2.0, 1.5, -1.0]
    assert greedy_ids(ScriptedModel(lambda prefix: logits))[:3] == [4, 4, 4]
    assert greedy_ids(ScriptedModel(lambda prefix: logits), repetition_penalty=2.0)[:3] == [4, 5, 4]
    # Three sentences of two beams at once: every row penalises its own tokens (4 5 4, then 4: 1.0 > 0.75).
    settings = {"beam_size": 2, "alpha": 0.0, "max_decode_length": 4, "repetition_penalty": 2.0}
    alone = beam_search(ScriptedModel(lambda prefix: logits), SOURCE, **settings).ids.numpy()[0, 0].tolist()
    rows = beam_search(ScriptedModel(lambda prefix: logits), SOURCE * 3, **settings).ids.numpy()[:, 0]
    assert alone == [4, 5, 4, 4] and rows.tolist() == [alone] * 3


def test_a_suppressed_sequence_is_never_produced():
    assert greedy_ids(ScriptedModel(LOOP))[:2] == [4, 5]
    ids = beam_search(ScriptedModel(LOOP), SOURCE, DecodingConfig.greedy(max_decode_length=8), suppress_ids=((4, 5),))
    tokens = ids.ids.numpy()[0, 0].tolist()
    assert (4, 5) not in bigrams(tokens)
    single = beam_search(ScriptedModel(LOOP), SOURCE, DecodingConfig.greedy(max_decode_length=8), suppress_ids=((4,),))
    assert 4 not in single.ids.numpy()[0, 0].tolist()


def test_controls_combine_with_a_prefix():
    prefix = tf.constant([[4, 5]], tf.int32)
    ids = greedy_search(ScriptedModel(LOOP), SOURCE, target_prefix=prefix, no_repeat_ngram_size=2, max_decode_length=8)
    tokens = ids.ids.numpy()[0, 0].tolist()
    assert tokens[:2] == [4, 5] and len(bigrams(tokens)) == len(set(bigrams(tokens)))


def test_controls_combine_with_constraints():
    """Dynamic beam allocation and the n-gram blocking and length floor at once: the phrase is
    there, no bigram twice, no EOS before 5 tokens."""
    phrase = tf.constant([[[5, 5]]], tf.int32)  # "5 5", which the looping model never writes itself
    result = beam_search(
        ScriptedModel(LOOP), SOURCE, beam_size=4, alpha=0.0, max_decode_length=8, constraints=phrase,
        no_repeat_ngram_size=2, min_decoding_length=5,
    )  # fmt: skip
    tokens = result.ids.numpy()[0, 0].tolist()
    assert (5, 5) in bigrams(tokens) and len(bigrams(tokens)) == len(set(bigrams(tokens))), tokens
    assert EOS not in tokens[:5], tokens


def test_controls_apply_to_sampling():
    result = sample(ScriptedModel(LOOP), SOURCE * 4, sampling_topk=0, num_samples=3, seed=1, no_repeat_ngram_size=2)
    for sentence in result.ids.numpy():
        for row in sentence:
            assert len(bigrams(row)) == len(set(bigrams(row))), row


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be >= 0"),
        ({"min_decoding_length": 5, "max_decoding_length": 5}, "must be below max_decoding_length"),
        ({"suppress_sequences": ("",)}, "a suppressed sequence must be text"),
    ],
)
def test_bad_control_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**settings)


@pytest.mark.slow
def test_the_controls_convert_to_tflite_builtins_and_give_the_graphs_beams(model):
    """Every control on at once, as an export with them would convert its search: TFLite builtin
    ops only, the same beams as the TensorFlow graph."""
    decoding = DecodingConfig(
        beam_size=3, length_b=30, min_decoding_length=3, repetition_penalty=1.5, no_repeat_ngram_size=2
    )
    assert_tflite_gives_the_graphs_beams(model, decoding)
