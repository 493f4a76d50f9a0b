"""The reserved token ids: their one definition, read by the tokenizer (which reserves them in
every vocabulary it learns), the config, the data pipeline, the loss, the metrics and the plots.

Plain Python, no TensorFlow: tools that run without it (the device client in export/) can
read the same facts from the tokenizer model these ids were written into.
"""

PAD_ID = 0  # pads a batch; masked out of attention, the loss and the metrics
START_ID = 1  # starts every decoder input: the target shifted right (SentencePiece's BOS)
EOS_ID = 2  # ends every source and every target
UNK_ID = 3  # a character the vocabulary never saw; detokenizing drops it
RESERVED_IDS = (PAD_ID, START_ID, EOS_ID, UNK_ID)
PIECES = {PAD_ID: "<pad>", START_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}  # how plots label them


def never_generated(disable_unk: bool = False) -> tuple[int, ...]:
    """The ids that no decoding ever outputs, the one statement of that rule (read by the search,
    sampling, scoring and the CTranslate2 export): pad and start, which are never targets, and
    the unknown token too with `disable_unk` (CTranslate2's option of that name)."""
    return (PAD_ID, START_ID, UNK_ID) if disable_unk else (PAD_ID, START_ID)
