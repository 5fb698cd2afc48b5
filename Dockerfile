# syntax=docker/dockerfile:1

# floodgate's image: a static binary (and floodgate replay's) on a
# distroless base, running as an unprivileged user. Build: docker build -t floodgate:dev .
# examples/docker_test.go runs this file's build command and checks the rest.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that editing the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo), reproducible paths, no symbol tables, the time zone
# database inside the binary for calendar windows in any time zone, and
# go-control-plane's generated encoders for answers (the Makefile's TAGS).
# The build context has no .git, so the version and commit that
# `floodgate version` prints are stamped: docker build
# --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) .
ARG TARGETOS TARGETARCH VERSION=(devel) COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w -X github.com/floodgate/floodgate/internal/buildinfo.stampedVersion=$VERSION -X github.com/floodgate/floodgate/internal/buildinfo.stampedCommit=$COMMIT" -tags timetzdata,vtprotobuf -o /out/floodgate ./cmd/server
# floodgate replay runs this program, found next to floodgate: the replay
# of recorded traffic is an offline tool, kept out of the server's binary.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w -X github.com/floodgate/floodgate/internal/buildinfo.stampedVersion=$VERSION -X github.com/floodgate/floodgate/internal/buildinfo.stampedCommit=$COMMIT" -tags timetzdata,vtprotobuf -o /out/floodgate-replay ./cmd/replay

# No shell, no package manager: the binary, CA certificates and a passwd
# entry for the nonroot user (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/floodgate /usr/local/bin/floodgate
COPY --from=build /out/floodgate-replay /usr/local/bin/floodgate-replay
# Manifests written for envoyproxy/ratelimit run /bin/ratelimit. A copy
# rather than a link: the final stage has no shell to make one, and a copied
# link would be followed or not depending on the builder.
COPY --from=build /out/floodgate /bin/ratelimit
# The demo rules, so that the image runs on its own. They are the default
# of last resort: -config, FLOODGATE_CONFIG and the reference server's
# RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY each win over
# FLOODGATE_DEFAULT_CONFIG, so that a deployment written for the reference
# server reads its own rules. Or mount yours over /etc/floodgate/config.
COPY config /etc/floodgate/config
ENV FLOODGATE_DEFAULT_CONFIG=/etc/floodgate/config
USER 65532:65532
# 8080: HTTP (/healthcheck, /json, /rlconfig, /metrics)
# 8081: gRPC (Envoy's RateLimitService, grpc.health.v1)
# The debug listener (/debug/pprof/, /rlconfig) is not exposed: it listens
# on the container's loopback, 127.0.0.1:6070, since profiles are not for
# the network. Reach it with kubectl port-forward, or run the image with
# -debug-addr :6070 and publish that port to a trusted address.
EXPOSE 8080 8081
# No CMD: a flag would win over the reference server's variables.
ENTRYPOINT ["/usr/local/bin/floodgate"]
