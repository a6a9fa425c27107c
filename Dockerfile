# The kto image: one Python environment with every kto command (watcher, reconciler,
# status-service, webhook, history, replay, ...) on the entrypoint `kto`; deploy/ runs it.
#   docker build -t kto:0.1.0 .
# torch is not installed (the optional extra '.[torch]' is for the local sandbox only).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY kto ./kto
COPY shared ./shared
COPY services ./services
COPY sim ./sim
COPY faulting ./faulting
COPY bench ./bench
COPY realparts ./realparts
COPY supervising ./supervising
RUN pip install . && rm -rf /src

WORKDIR /
# The Deployments run it as this user, read-only root filesystem, /tmp an emptyDir.
USER 65532:65532
ENTRYPOINT ["kto"]
CMD ["--help"]
