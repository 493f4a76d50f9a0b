import numpy as np
import pytest
from conftest import scramble

from keras_transformer import DecodingConfig, Transformer, TransformerConfig
from keras_transformer.search.decoding import (
    compiled,
    decode_limits,
    greedy_search,
    search_beams,
    traced_beam_search,
)
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

CONFIG = TransformerConfig.tiny(vocab_size=40, dropout=0.0, max_length=20)
SOURCE = np.array([[5, 6, 7, 2], [8, 2, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def model():
    model = Transformer(CONFIG)
    model.build()
    return scramble(model)


def reference_greedy(model, source, steps):
    """Uncached greedy decoding: the full forward pass over the growing prefix."""
    target = np.full((len(source), 1), START_ID, np.int32)
    for _ in range(steps):
        logits = np.array(model((source, target)))[:, -1]
        logits[:, [PAD_ID, START_ID]] = -np.inf
        target = np.concatenate([target, logits.argmax(-1)[:, None].astype(np.int32)], axis=1)
    return target[:, 1:]


def test_greedy_equals_uncached_argmax_decoding(model):
    result = greedy_search(model, SOURCE, length_b=5)
    assert result.ids.shape[:2] == (2, 1) and result.scores.shape == (2, 1)
    ids = result.ids.numpy()[:, 0]
    expected = reference_greedy(model, SOURCE, ids.shape[1])
    assert len(np.unique(expected)) >= 3
    for row, reference, limit in zip(ids, expected, [9, 7]):  # |source| + 5
        eos = np.flatnonzero(reference == EOS_ID)
        end = min(eos[0] + 1 if len(eos) else len(reference), limit)
        np.testing.assert_array_equal(row[:end], reference[:end])
        assert np.all(row[end:] == PAD_ID)
    assert np.all(result.scores.numpy() < 0)


def loop_op_types(function, *args) -> set[str]:
    """The op types of the while loops' bodies in `function`'s graph for `args`."""
    return {node.op for body in loop_bodies(function, *args) for node in body.node_def}


def test_the_searchs_attention_runs_no_op_that_onednn_makes_per_shape(model):
    """A step's attention changes shape at every step: as `Einsum` or `BatchMatMulV2` (which
    TensorFlow's oneDNN rewrite turns into a primitive per shape) it made primitives anew at every
    step; as `BatchMatMulV3` it runs TensorFlow's own kernel (`attention.batch_matmul`)."""
    function = compiled(model, "beam", search_beams, decoding=DecodingConfig())
    types = loop_op_types(function, SOURCE)
    assert "BatchMatMulV3" in types
    assert not types & {"Einsum", "BatchMatMul", "BatchMatMulV2"}, types


def loop_bodies(function, *args) -> list:
    """The function definitions of the while loops' bodies in `function`'s graph for `args`."""
    library = function.get_concrete_function(*args).graph.as_graph_def().library.function
    return [body for body in library if "while_body" in body.signature.name]


def test_the_searchs_steps_read_the_output_projection_transposed_once(model):
    """A step's logits multiply by E^T made before the loop (`SharedEmbedding.output_projection`):
    no op in the loop transposes a weight, which oneDNN's matmul did inside the op at every step
    (1.3-2.2x as long)."""
    function = compiled(model, "beam", search_beams, decoding=DecodingConfig())
    (body,) = loop_bodies(function, SOURCE)
    producer = {node.name: node.op for node in body.node_def}
    inputs = {
        node.name: [producer.get(name.split(":")[0], "loop input") for name in node.input] for node in body.node_def
    }
    transposed = [
        node.name for node in body.node_def if node.op == "Transpose" and "ReadVariableOp" in inputs[node.name]
    ]
    assert not transposed
    assert any(node.op == "MatMul" and inputs[node.name][1] == "loop input" for node in body.node_def)


def test_length_limits():
    limits = decode_limits(SOURCE, max_length=20, a=1.0, b=5).numpy()
    np.testing.assert_array_equal(limits, [9, 7])  # |source| + 5
    np.testing.assert_array_equal(decode_limits(SOURCE, 8, 1.0, 50).numpy(), [8, 8])  # capped


def test_limits_bound_the_output(model):
    ids = greedy_search(model, SOURCE, length_a=0.0, length_b=3).ids.numpy()
    assert ids.shape[-1] == 3


def test_no_retracing_for_new_shapes(model):
    greedy_search(model, SOURCE)
    function = traced_beam_search(model, DecodingConfig.greedy())
    greedy_search(model, np.array([[5, 6, 7, 8, 9, 2]], np.int32))
    greedy_search(model, SOURCE[:1])
    assert function.experimental_get_tracing_count() == 1


def test_a_model_never_called_builds_itself_to_decode():
    fresh = Transformer(CONFIG)
    assert not fresh.built
    result = greedy_search(fresh, SOURCE, length_b=3)
    assert fresh.built and result.ids.shape == (2, 1, 7)  # |source| + 3
    np.testing.assert_array_equal(
        greedy_search(fresh, SOURCE, length_b=3).ids, result.ids
    )  # the same weights both times


def test_xla_on_bucket_shapes_gives_the_graphs_beams(model):
    """Batches padded to their bucket shape (extra rows and columns of pad) decode as the
    TensorFlow graph decodes them unpadded, and come back cut to the same shape. Every batch here
    pads to the one bucket [4, 16] (`test_bucket_shapes`), so XLA compiles once."""
    from keras_transformer import beam_search
    from keras_transformer.search.decoding import bucket_shape

    sources = [
        np.array([[9, 8, 7, 6, 5, 2], [3, 2, 0, 0, 0, 0], [4, 4, 2, 0, 0, 0]], np.int32),  # a row and 10 columns
        np.array([[5, 6, 7, 2], [8, 2, 0, 0], [9, 4, 2, 0], [6, 2, 0, 0]], np.int32),  # 12 columns only
        np.array([[5, 6], [8, 2], [7, 7]], np.int32),  # a row and 14 columns; rows without EOS
    ]
    for source in sources:
        assert tuple(int(n) for n in bucket_shape(*source.shape, max_length=20)) == (4, 16)
        expected = beam_search(model, source, beam_size=3, alpha=0.6, length_b=6)
        result = beam_search(model, source, beam_size=3, alpha=0.6, length_b=6, jit_compile=True)
        np.testing.assert_array_equal(result.ids, expected.ids)
        np.testing.assert_allclose(result.scores, expected.scores, rtol=1e-5)


@pytest.mark.parametrize(
    "shape, bucket", [((1, 1), (1, 16)), ((3, 16), (4, 16)), ((32, 17), (32, 20)), ((200, 7), (200, 16))]
)
def test_bucket_shapes(shape, bucket):
    from keras_transformer.search.decoding import bucket_shape

    assert tuple(int(n) for n in bucket_shape(*shape, max_length=20)) == bucket


def test_an_empty_source_ends_at_once(model):
    source = np.array([[5, 6, 7, 2], [0, 0, 0, 0]], np.int32)
    result = greedy_search(model, source, length_b=5)
    assert result.ids.shape == (2, 1, 9) and np.count_nonzero(result.ids.numpy()[1]) == 1


def test_threads_asking_for_one_compiled_search_at_once_get_one_function(monkeypatch):
    """A service's thread pool calls a cold `Translator` from every thread: `compiled` hands them
    one `tf.function`, so the search is traced once, not once per thread that got there first."""
    import threading
    import time

    from keras_transformer.search import search

    make = search.graph_function

    def slow_graph_function(*args, **kwargs):  # widens the window between the lookup and the store
        time.sleep(0.05)
        return make(*args, **kwargs)

    monkeypatch.setattr(search, "graph_function", slow_graph_function)
    model = type("Model", (), {})()  # a key of `compiled`'s cache no other test uses (never called)
    start, got = threading.Barrier(8), []

    def ask():
        start.wait()
        got.append(compiled(model, "search", search_beams, decoding=DecodingConfig()))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and len({id(function) for function in got}) == 1


def test_a_decoded_model_is_freed_with_its_traced_searches():
    """The compile cache keeps a model's traced searches only while the model lives: a model that
    nothing else holds (a translator's `with_dtype` copy, an ensemble) is freed, graphs and all."""
    import gc
    import weakref

    from keras_transformer.search import search

    model = Transformer(CONFIG)
    greedy_search(model, SOURCE)
    assert model in search._COMPILED  # traced and cached
    reference = weakref.ref(model)
    del model
    gc.collect()
    assert reference() is None
