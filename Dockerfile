# The processor binary (every subcommand) and the healthcheck docker-compose.yml runs, on a
# small runtime image. `make image` builds it with docker or podman (`make image-push
# REGISTRY=...` pushes it); VERSION is what `processor version` prints.
FROM golang:1.26 AS build
ARG VERSION=devel
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/processor ./cmd/processor
RUN CGO_ENABLED=0 go build -trimpath -o /out/healthcheck ./deploy/healthcheck

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/processor /processor
# The runtime image has no shell, curl or wget: compose's healthchecks run /healthcheck, which
# asks /readyz on the container's own port (deploy/healthcheck). Kubernetes probes HTTP itself.
COPY --from=build /out/healthcheck /healthcheck
# In a container the HTTP server (/healthz, /readyz, /metrics, the indexer's API) must listen on
# the pod's or container's address, not on loopback (the binary's default outside containers).
ENV CKF_HTTP_LISTEN=0.0.0.0:8080
EXPOSE 8080
# Not root (distroless's nonroot user): the services keep their state in Kafka. Only
# `processor replay` writes files (its report): mount a writable folder for it.
USER 65532:65532
ENTRYPOINT ["/processor"]
# No default job: name the command (relay, indexer, demo, ...); this prints the usage.
CMD ["help"]
