"""`python -m keras_transformer` = the `keras-transformer` command."""

import sys

from keras_transformer.cli.main import main

sys.exit(main())
