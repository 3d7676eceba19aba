"""Shared by the chemistry tests (importable: pytest puts this folder on sys.path)."""
import io
import urllib.error
import urllib.request


def serve_urls(monkeypatch, payload: bytes, fail: bool = False) -> list:
    """Patch ``urlopen`` to answer every address with ``payload`` (or to fail like an offline
    machine); returns the list of addresses asked for."""
    calls = []

    def urlopen(url, timeout=None):
        calls.append(url)
        if fail:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        return io.BytesIO(payload)
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return calls
