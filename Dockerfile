# syntax=docker/dockerfile:1
#
# The reclaimable image: one static binary, nothing else.
#   docker build --build-arg VERSION=$(cat VERSION) -t ghcr.io/reclaimable/reclaimable:$(cat VERSION) .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...

# The build runs on the builder's own platform and cross-compiles, which is
# fast and needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
# Exactly as "make build" builds it.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/reclaimable ./cmd/reclaimable

# No shell, no package manager; CA certificates and /etc/passwd entries only.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reclaimable /reclaimable
USER 65532:65532
ENTRYPOINT ["/reclaimable"]
