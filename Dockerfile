# syntax=docker/dockerfile:1
# wowd container image: a static binary built exactly as `make build` builds
# it, on a distroless base, running as a non-root user.
#
#   make docker                     # docker build -t wowd:$(VERSION) --build-arg VERSION=$(VERSION) .
#   docker run --rm -v $PWD/my.yaml:/etc/wowd/wowd.yaml:ro -p 9464:9464 wowd:dev
#
# The configuration is read from /etc/wowd/wowd.yaml: WOWD_CONFIG names it,
# so `wowd run` is `wowd run --config /etc/wowd/wowd.yaml`. The default file
# is deploy/wowd.container.yaml. Override it by mounting over it, or set
# WOWD_CONFIG to another path. The arguments default to `run`; any other
# wowd command works too, reading the same file:
#   docker run --rm -v $PWD/my.yaml:/etc/wowd/wowd.yaml:ro wowd:dev config validate
# test/deploy checks the invariants of this file (non-root user, entry point,
# configuration path, exposed port = the metrics port of the image's config).

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so the download layer is cached across source changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# No .git in the build context: the version comes from the build argument.
ARG VERSION=devel
RUN make build VERSION="${VERSION}"

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=devel
LABEL org.opencontainers.image.title="wowd" \
      org.opencontainers.image.description="Dispatches Kafka messages of Wow services to handlers, in order per aggregate" \
      org.opencontainers.image.source="https://github.com/wowd/wowd" \
      org.opencontainers.image.url="https://github.com/wowd/wowd" \
      org.opencontainers.image.documentation="https://github.com/wowd/wowd/blob/main/docs/operations.md" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /src/bin/wowd /usr/local/bin/wowd
COPY deploy/wowd.container.yaml /etc/wowd/wowd.yaml
ENV WOWD_CONFIG=/etc/wowd/wowd.yaml
# 65532 is distroless' nonroot user; numeric so runAsNonRoot can verify it.
USER 65532:65532
# /metrics, /healthz and /readyz (wow.metrics.listen in the config above).
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/wowd"]
CMD ["run"]
