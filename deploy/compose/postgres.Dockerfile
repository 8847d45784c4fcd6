# PostgreSQL for compose.yaml's store, on the same base as thresher's image (no registry
# needed: Debian's `postgresql` package). The server listens on 127.0.0.1 only (the
# stack runs with host networking) and trusts that address: put it behind a password
# (POSTGRES_AUTH=scram-sha-256 and a .pgpass) before anything else can reach the host.
ARG BASE=python:3.11-slim
FROM ${BASE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && ln -s "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)" /usr/local/lib/pgbin \
 && mkdir -p /var/lib/postgresql/data && chown postgres:postgres /var/lib/postgresql/data
COPY deploy/compose/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PATH=/usr/local/lib/pgbin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
VOLUME ["/var/lib/postgresql/data"]
ENTRYPOINT ["postgres-entrypoint"]
