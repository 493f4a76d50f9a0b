"""A translation service speaking LibreTranslate's HTTP API (`keras-transformer serve`; issue 52).

app.py         the Starlette app: routes, request parsing, answers
batching.py    dynamic batching: concurrent requests merged by token budget and timeout, one model thread
limits.py      API keys, requests per minute, characters per request
metrics.py     Prometheus counters and histograms (GET /metrics)
languages.py   the model's languages, and per-item language detection for source=auto (lingua)
"""
