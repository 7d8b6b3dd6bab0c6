# The voltbus image: every voltbus service runs from it (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# VB_EXTRAS=learn (default): the CPU services, with torch's CPU wheel first (from PyTorch's CPU index)
# so `.[learn]` does not pull the CUDA one. VB_EXTRAS=gpu: the verl learner (verl 0.9.1, CUDA torch 2.11).
ARG VB_EXTRAS=learn
RUN if [ "$VB_EXTRAS" = learn ]; then pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu; fi

COPY pyproject.toml README.md ./
COPY voltbus voltbus
COPY schemas schemas
COPY services services
COPY projections projections
RUN pip install -e ".[$VB_EXTRAS]"

# Examples last: the compose services run the arith_rl example (agent, model, tasks).
COPY examples examples

CMD ["voltbus", "--help"]
