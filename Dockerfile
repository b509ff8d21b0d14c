# The processor binary (all subcommands) on a small runtime image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/processor ./cmd/processor

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/processor /processor
ENTRYPOINT ["/processor"]
CMD ["demo"]
