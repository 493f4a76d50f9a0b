"""Parallel text as `tf.data` (Vaswani et al., 2017, §5.1): find the files, split, parse, tokenize, batch.

Data sources (`spec`):
- `bible-en-de`: the embedded public-domain Bible, English -> German (resources/README.md),
  split by whole books: validation = Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon;
  test = Ruth, Esther, Romans, James; train = the other 57 books.
- TSV files (optionally `.gz`): a path, a glob (`shards/train-*.tsv.gz`) or several of them
  separated by commas. Each line is `source<TAB>target`, or every file has the Bible files'
  layout, a `book chapter verse <src> <tgt>` header, and is split by books as above.
- `tfds:NAME` (e.g. `tfds:wmt14_translate/de-en`): a TensorFlow Datasets translation dataset
  with supervised keys (source, target), read from `tfds_data_dir` (default `$TFDS_DATA_DIR`,
  else ~/tensorflow_datasets); one that is not prepared there is downloaded, which needs the
  internet.

Splits (`split`): "train", "validation", "test", or `WHOLE` (every pair). The Bible layout and
TFDS carry their own splits. A single plain TSV file is cut in contiguous blocks by line
number, the first 96% train, the next 2% validation, the last 2% test (`TSV_BLOCKS`); several
plain files have no implicit split. `DataConfig` names which source and split each role uses
(`split_source`).

One module per concern: `files` (which files, which layout), `splits` (split policy),
`parsing` (lines to checked pairs, in the graph), `errors` (`DataError` with file and line),
`sources` (a source's split as a stream), `held_out` (a model dir's held-out pairs), `augmentation`
(casing and noise of training pairs), `batching` (tokenize, filter, bucket, batch) and `tokenizer`
(the SentencePiece subword vocabulary).
"""
