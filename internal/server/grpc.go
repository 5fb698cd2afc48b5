package server

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync/atomic"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/envoy"
)

// streamWorkers is how many goroutines run calls: enough for the calls in
// flight, which wait on the store, since a call that finds every worker
// busy runs on a new goroutine, whose stack must grow.
const streamWorkers = 64

// FlowWindow is the fixed flow-control window of each gRPC stream and
// connection the server accepts, in bytes: decisions never wait for a
// window update, and a large RLQS report waits for one per MiB.
const FlowWindow = 1 << 20

// grpcOptions tune the gRPC server for many small unary calls on a few
// long-lived connections (Envoy's). Flow-control windows are fixed, since
// grpc-go's default, sized by bandwidth-delay estimates, sends a window
// update and a PING for nearly every request at Envoy's usual rates.
func (s *Server) grpcOptions(codec *envoy.Codec) []grpc.ServerOption {
	// gRPC bounds every message alike: to RLQS reports' bound when RLQS is
	// served (envoy.Codec holds RLS requests to theirs).
	maxRecv := s.opts.MaxMessageBytes
	if s.opts.RLQS != nil {
		maxRecv = s.opts.MaxReportBytes
	}
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(max(streamWorkers, uint32(runtime.GOMAXPROCS(0)))),
		grpc.MaxRecvMsgSize(maxRecv),
		grpc.ForceServerCodecV2(codec),
		grpc.UnknownServiceHandler(s.unknownMethod),
		grpc.StaticStreamWindowSize(FlowWindow),
		grpc.StaticConnWindowSize(FlowWindow),
	}
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	return append(opts, s.opts.Conns.grpcConnOptions(s.opts.MaxConnectionAge, s.opts.MaxConnectionAgeGrace)...)
}

// refusedUnknownMethod is the reason envoy.Metrics.Refused documents for a
// method not served, which a listener gives too.
const refusedUnknownMethod = "unknown_method"

// unknownMethod answers a call of a method the server does not serve, as
// gRPC would (Unimplemented), and counts it.
func (s *Server) unknownMethod(_ any, stream grpc.ServerStream) error {
	s.opts.Refused(refusedUnknownMethod)
	method, _ := grpc.MethodFromServerStream(stream)
	return status.Errorf(codes.Unimplemented, "unknown method %s", method)
}

// inFlight is the RLS service counting in n the calls it answers.
type inFlight struct {
	pb.RateLimitServiceServer
	n *atomic.Int64
}

func (f inFlight) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	f.n.Add(1)
	defer f.n.Add(-1)
	return f.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}

// listenGRPC listens on a TCP address, or on a unix socket for
// "unix:/path" (also "unix:///path").
func listenGRPC(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return net.Listen("unix", strings.TrimPrefix(path, "//"))
	}
	return net.Listen("tcp", addr)
}
