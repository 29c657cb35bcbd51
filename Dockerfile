# The five agents of examples/multi_agent in one `harness serve`, against a Temporal server in its
# own container (compose.yaml runs both: `docker compose up --build`). Build alone with
# `docker build -t harness-runtime .`; docs/deployment.md, "Containers".
FROM python:3.11-slim

WORKDIR /app
# The project first, so that changing an example does not reinstall it.
COPY pyproject.toml README.md ./
COPY harness_core harness_core
COPY harness_asgi harness_asgi
RUN pip install --no-cache-dir .
COPY examples examples

# Not root. The agents' stores live in examples/multi_agent/.harness (beside their files): a volume.
RUN useradd --create-home --uid 10001 agent \
    && mkdir -p examples/multi_agent/.harness \
    && chown agent examples/multi_agent/.harness
USER agent
ENV PYTHONPATH=/app/examples
EXPOSE 8000
VOLUME ["/app/examples/multi_agent/.harness"]

# `/` lists the agents once they all serve.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)"]

# SIGTERM (docker stop): requests in flight get [server] graceful_timeout, running turns go back
# to Temporal, and another process (or this one, restarted) finishes them.
STOPSIGNAL SIGTERM
CMD ["harness", "serve", \
     "--bind", "0.0.0.0:8000", \
     "--temporal-address", "temporal:7233", \
     "--public-url", "http://127.0.0.1:8000", \
     "examples/multi_agent/a.toml", "examples/multi_agent/b.toml", "examples/multi_agent/c.toml", \
     "examples/multi_agent/d.toml", "examples/multi_agent/e.toml"]
