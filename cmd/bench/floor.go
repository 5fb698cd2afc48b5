package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// The gRPC floor (-grpc-floor) is what a grpc-go server costs per call on
// this machine when it decides nothing: a child process of this tool that
// serves ShouldRateLimit with grpc-go set up as floodgate sets it up (64
// stream workers, GOGC 400), reads each request as bytes and sends one
// answer encoded once, OK for one descriptor. No server built on grpc-go
// spends less CPU per call under the same load; floodgate's CPU per
// decision minus the floor is what its own work, Redis round trips
// included, costs.

// targetFloor is result.Target for the floor.
const targetFloor = "grpc-floor"

// floorAddrEnv, when set, makes the tool serve the floor on its address
// instead of measuring (the child process of -grpc-floor).
const floorAddrEnv = "FLOODGATE_BENCH_FLOOR_ADDR"

// floorStreamWorkers and floorGOGC are floodgate's own settings
// (pkg/server's streamWorkers, cmd/server's defaultGOGC).
const (
	floorStreamWorkers = 64
	floorGOGC          = 400
)

// rawCodec passes messages through as bytes: the floor spends nothing on
// protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = data
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// serveFloor serves the floor on addr until the process is stopped.
func serveFloor(addr string) error {
	debug.SetGCPercent(floorGOGC)
	answer, err := proto.Marshal(&pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 1}},
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s := grpc.NewServer(grpc.NumStreamWorkers(floorStreamWorkers), grpc.ForceServerCodec(rawCodec{}))
	desc := grpc.ServiceDesc{
		ServiceName: pb.RateLimitService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "ShouldRateLimit",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return &answer, nil
			},
		}},
	}
	var impl any = struct{}{}
	s.RegisterService(&desc, impl)
	return s.Serve(l)
}

// startFloor starts the floor in a child process on a free port and
// returns when it answers.
func startFloor(ctx context.Context, dir string) (*process, server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, server{}, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, server{}, err
	}
	os.Setenv(floorAddrEnv, addr)
	p, err := startProcess("grpc floor", self, nil, filepath.Join(dir, "floor.log"))
	os.Unsetenv(floorAddrEnv)
	if err != nil {
		return nil, server{}, err
	}
	err = waitFor(ctx, p, 10*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		p.stop(time.Second)
		return nil, server{}, fmt.Errorf("grpc floor on %s: %w\n%s", addr, err, p.logTail())
	}
	return p, server{grpcAddr: addr, pid: p.pid()}, nil
}
