"""Each optimizer test that asks for it runs under both CPU backends."""
import pytest

from minitransformer import backend


@pytest.fixture(params=["numpy", "strict"])
def any_backend(request):
    """Run the test under each CPU backend, then restore NumPy."""
    backend.use(request.param)
    try:
        yield request.param
    finally:
        backend.use("numpy")
