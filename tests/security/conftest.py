import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every abuse case is refused on both AnyIO backends."""
    return str(request.param)
