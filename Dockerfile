# One image for both components: `nativedra plugin` (DaemonSet, runs as root for devices and
# host paths) and `nativedra extender` (Deployment, runs as the non-root user below).
# BASE: any Debian bookworm image with python3 (and python3-venv). Where no registry is reachable,
# `make image` builds one from Debian's packages (nativedra/cluster/image.py) and passes it here.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# Installed into a venv that the final stage copies whole: no wheel layer left behind.
RUN python3 -m venv /opt/nativedra
WORKDIR /src
# Exactly the lock's runtime pins, hashes checked, nothing resolved (a layer of its own, kept while
# only the source changes); then the package, built by the locked setuptools, which leaves with pip.
COPY requirements/runtime.txt requirements/
RUN /opt/nativedra/bin/pip install --no-cache-dir --disable-pip-version-check --require-hashes --no-deps \
    -r requirements/runtime.txt
COPY pyproject.toml README.md ./
COPY nativedra/ nativedra/
COPY dra_driver/ dra_driver/
COPY cdi/ cdi/
COPY extender/ extender/
# The examples and DeviceClasses ship inside the package (nativedra/data links to them).
COPY manifests/ manifests/
RUN /opt/nativedra/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps --no-build-isolation . \
    && /opt/nativedra/bin/pip uninstall --yes setuptools wheel pip

FROM ${BASE}
COPY --from=build /opt/nativedra /opt/nativedra
ENV PATH=/opt/nativedra/bin:$PATH PYTHONDONTWRITEBYTECODE=1
# The extender's user. The plugin needs root for host paths and devices: its DaemonSet sets
# runAsUser: 0 (checked by tests/manifests/test_plugin_daemonset.py).
USER 65532:65532
ENTRYPOINT ["nativedra"]
CMD ["--help"]
