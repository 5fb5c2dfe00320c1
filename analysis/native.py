"""The native extractor (build/analysis/ctfcols, C over libbabeltrace2), when built."""


def available():
    return False


def read(path, src):  # pragma: no cover - replaced when the extractor exists
    return None
