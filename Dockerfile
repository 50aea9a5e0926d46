# One image for both components: `nativedra plugin` (DaemonSet, runs as root for devices and
# host paths) and `nativedra extender` (Deployment, runs as the non-root user below).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nativedra/ nativedra/
COPY dra_driver/ dra_driver/
COPY cdi/ cdi/
COPY extender/ extender/
COPY kube/ kube/
COPY cmdline/ cmdline/
COPY fsutil/ fsutil/
# The examples and DeviceClasses ship inside the package (nativedra/data links to them).
COPY manifests/ manifests/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The extender's user. The plugin needs root for host paths and devices: its DaemonSet sets
# runAsUser: 0 (checked by tests/manifests/test_plugin_daemonset.py).
USER 65532:65532
ENTRYPOINT ["nativedra"]
CMD ["--help"]
