"""Translate with TF Serving's REST API: POST {"instances": [...]} to :predict.

    python export/rest_client.py --host localhost:8501 --model translator "Jesus wept."

Standard library only. `request_body` is the JSON body; tests run its instances through the
exported signature.
"""

import argparse
import json
import urllib.request


def request_body(texts, signature="serving_default"):
    """The row-format :predict body: one instance per sentence (the signature's only input)."""
    return {"signature_name": signature, "instances": list(texts)}


def translate(texts, host="localhost:8501", model="translator", timeout=30.0):
    """[(translation, score)] from a running model server."""
    request = urllib.request.Request(
        f"http://{host}/v1/models/{model}:predict",
        data=json.dumps(request_body(texts)).encode("utf-8"),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        predictions = json.load(response)["predictions"]
    return [(p["translation"], p["score"]) for p in predictions]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="localhost:8501")
    parser.add_argument("--model", default="translator")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args()
    for translation, score in translate(args.text, args.host, args.model):
        print(f"{score:.3f}\t{translation}")


if __name__ == "__main__":
    main()
