# The processor binary (all subcommands) on a small runtime image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/processor ./cmd/processor

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/processor /processor
# In a container the HTTP server (/healthz, /readyz, /metrics, the indexer's API) must listen on
# the pod's or container's address, not on loopback (the binary's default outside containers).
ENV CKF_HTTP_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/processor"]
# No default job: name the command (relay, indexer, demo, ...); this prints the usage.
CMD ["help"]
