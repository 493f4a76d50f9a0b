#!/bin/sh
# Export a trained model and check its serving contract: export/export.sh MODEL_DIR OUT [NAME]
set -eu
keras-transformer export --model-dir "$1" --out "$2" --name "${3:-translator}"
keras-transformer export --check "$2"
