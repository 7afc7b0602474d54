# One image for the API and the workers. PyPI's torch wheels carry CUDA, so the worker container
# uses the GPU when started with a device reservation (see docker-compose.yml) and the CPU otherwise.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    MAD_DATA_DIR=/data MAD_ENV=production

WORKDIR /srv/mad-arena
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN pip install --editable . && useradd --create-home --uid 1000 mad && mkdir -p /data && chown mad /data

USER mad
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["sh", "-c", "mad db upgrade && mad serve --host 0.0.0.0 --port 8000 --workers 2"]
