# One image recipe for both ends: EXTRA=server (coordinator with the dashboard) or EXTRA=peer.
# The dashboard is built in a Node stage and packaged as server/static, which the coordinator
# serves when no frontend directory is configured.
FROM node:22-slim AS dashboard
WORKDIR /frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY frontend/ ./
RUN npm run build

FROM python:3.11-slim
ARG EXTRA=server
# Peers need torch; its CPU wheels live on PyTorch's own index (PyPI's default pulls CUDA builds).
ARG PIP_EXTRA_INDEX_URL=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY swarmhub/ swarmhub/
COPY launch/ launch/
COPY server/ server/
COPY peer/ peer/
COPY migrations/ migrations/
COPY --from=dashboard /frontend/dist/ server/static/
RUN pip install ${PIP_EXTRA_INDEX_URL:+--extra-index-url "$PIP_EXTRA_INDEX_URL"} ".[${EXTRA}]" \
    && useradd --create-home --uid 1000 swarmhub \
    && mkdir -p /var/lib/swarmhub && chown swarmhub /var/lib/swarmhub
USER swarmhub
WORKDIR /var/lib/swarmhub
EXPOSE 8000
CMD ["swarmhub", "serve", "--host", "0.0.0.0", "--port", "8000"]
