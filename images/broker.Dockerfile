# The Skiff broker. Build from the repository root:
#   docker build -f images/broker.Dockerfile -t skiff/broker:0.1.0 .
# Runs as a non-root user with a read-only root filesystem; the data directory
# (/var/lib/skiff) is the pod's volume and /tmp an emptyDir.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY broker broker
COPY operator operator
RUN python -m venv /opt/skiff \
    && /opt/skiff/bin/pip install --no-cache-dir --no-compile . \
    && /opt/skiff/bin/python -m compileall -q /opt/skiff

FROM python:3.11-slim
COPY --from=build /opt/skiff /opt/skiff
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/skiff skiff \
    && install -d -o 10001 -g 10001 /var/lib/skiff
ENV PATH=/opt/skiff/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SKIFF_DATA_DIR=/var/lib/skiff
USER 10001:10001
VOLUME ["/var/lib/skiff"]
EXPOSE 8081 10912
ENTRYPOINT ["skiff"]
CMD ["broker"]
