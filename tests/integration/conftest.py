import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Core scenarios run on both AnyIO backends."""
    return str(request.param)
