# The Skiff operator. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t skiff/operator:0.1.0 .
# Non-root, read-only root filesystem (the chart mounts an emptyDir on /tmp).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY broker broker
COPY operator operator
RUN python -m venv /opt/skiff \
    && /opt/skiff/bin/pip install --no-cache-dir --no-compile '.[operator]' \
    && /opt/skiff/bin/python -m compileall -q /opt/skiff

FROM python:3.11-slim
COPY --from=build /opt/skiff /opt/skiff
RUN useradd --uid 10001 --user-group --no-create-home skiff
ENV PATH=/opt/skiff/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["skiff-operator"]
