"""The five agents of examples/multi_agent inside your own Starlette app, served by Hypercorn.

    PYTHONPATH=examples hypercorn multi_agent.app:app --bind 127.0.0.1:8000

Each agent is mounted at /agents/<id> and the app's lifespan starts them (one shared embedded
Temporal dev server, a store each under examples/multi_agent/.harness/) and stops them in reverse.
``/`` lists them.
"""

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from harness_core import Harness, HarnessGroup, load_settings
from harness_core.logs import configure_logging

HERE = Path(__file__).parent

# The host configures logging (Hypercorn only configures its own loggers): the agents' INFO lines,
# each tagged with its agent, secrets masked.
configure_logging("INFO")

agents = [
    Harness(load_settings(HERE / f"{name}.toml"), prefix=f"/agents/{name}") for name in "abcde"
]
group = HarnessGroup(*agents)


async def home(request: Request) -> JSONResponse:
    return JSONResponse({"agents": {h.agent_id: h.public_url for h in agents}})


app = Starlette(
    routes=[Route("/", home), *(Mount(h.prefix, app=h.asgi_app()) for h in agents)],
    lifespan=group.lifespan,
)
