# The voltbus image: every voltbus service runs from it (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# The CPU wheel of torch first (from PyTorch's CPU index), so `.[learn]` does not pull the CUDA one.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

COPY pyproject.toml README.md ./
COPY voltbus voltbus
COPY schemas schemas
COPY services services
COPY projections projections
RUN pip install -e '.[learn]'

# Examples last: the compose services run the arith_rl example (agent, model, tasks).
COPY examples examples

CMD ["voltbus", "--help"]
