"""The ``RESULT {...}`` lines the shard workers print, parsed even when the two ranks' lines
share one line of the launcher's output."""

import json


def results(text: str) -> list[dict]:
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(part)[0] for part in text.split("RESULT ")[1:]]
